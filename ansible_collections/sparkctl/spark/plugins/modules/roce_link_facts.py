#!/usr/bin/python
"""Ansible module: live state of the fabric twins, parsed in Python.

Reads, for each netdev: ``ethtool`` (speed, link detected), sysfs (MTU,
operstate), ``ip -j addr`` (IPv4 addresses), and ``ibdev2netdev`` (which RoCE
device maps to it and whether it is Up). Parsing lives in plain functions
that the unit tests import.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    ethtool,
    ibdev2netdev,
    ip_addr,
)

DOCUMENTATION = r"""
---
module: roce_link_facts
short_description: Live state of the RoCE fabric netdevs
description:
  - Returns speed, link, MTU, operstate, IPv4 addresses and the RoCE device
    mapping (from ibdev2netdev) of each given netdev. Never changes anything.
options:
  netdevs:
    description: Netdev names to report.
    type: list
    elements: str
    required: true
  sysctls:
    description:
      - Sysctl keys (dotted, e.g. net.ipv4.conf.all.arp_ignore) to read from
        /proc/sys as well, so one call returns everything the role verifies.
    type: list
    elements: str
    default: []
author: sparkctl developers
"""

RETURN = r"""
links:
  description: netdev -> {speed_mbps, link_detected, mtu, operstate, ipv4, ibdev, ibdev_state}
  type: dict
  returned: always
sysctls:
  description: key -> value as the kernel reports it (whitespace collapsed), null when absent
  type: dict
  returned: always
"""


def sysctl_path(key: str) -> Path:
    """/proc/sys path of a dotted key; a netdev name may itself hold dots, so
    only net.*.conf.<dev>.* keys keep the dots of <dev> (as sysctl(8) does with '/')."""
    parts = key.split(".")
    if len(parts) > 5 and parts[0] == "net" and parts[2] in ("conf", "neigh"):
        parts = [*parts[:3], ".".join(parts[3:-1]), parts[-1]]
    return Path("/proc/sys", *parts)


def read_sysctls(keys: list[str], root: Path = Path("/")) -> dict[str, str | None]:
    """Values as `sysctl -n` prints them (tabs and runs of spaces become one space)."""
    out: dict[str, str | None] = {}
    for key in keys:
        path = root / sysctl_path(key).relative_to("/")
        try:
            out[key] = " ".join(path.read_text().split())
        except FileNotFoundError:
            out[key] = None
    return out


def collect(netdevs: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Gather live state; return (links, warnings)."""
    warnings: list[str] = []
    ib: dict[str, dict[str, Any]] = {}
    if shutil.which("ibdev2netdev"):
        proc = subprocess.run(["ibdev2netdev"], capture_output=True, text=True, check=False)
        ib = {row["netdev"]: row for row in ibdev2netdev(proc.stdout)}
    else:
        warnings.append("ibdev2netdev is not installed (MLNX OFED / DOCA tools)")
    addrs = ip_addr(
        subprocess.run(
            ["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=True
        ).stdout
    )
    links: dict[str, Any] = {}
    for dev in netdevs:
        sysfs = Path("/sys/class/net") / dev
        if not sysfs.exists():
            links[dev] = {"present": False}
            continue
        eth = subprocess.run(["ethtool", dev], capture_output=True, text=True, check=False)
        info = ethtool(eth.stdout)
        links[dev] = {
            "present": True,
            "speed_mbps": info["speed_mbps"],
            "link_detected": bool(info["link_detected"]),
            "mtu": int((sysfs / "mtu").read_text()),
            "operstate": (sysfs / "operstate").read_text().strip(),
            "ipv4": addrs.get(dev, []),
            "ibdev": ib.get(dev, {}).get("ibdev"),
            "ibdev_state": ib.get(dev, {}).get("state"),
        }
    return links, warnings


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415

    module = AnsibleModule(
        argument_spec={
            "netdevs": {"type": "list", "elements": "str", "required": True},
            "sysctls": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        links, warnings = collect(module.params["netdevs"])
        sysctls = read_sysctls(module.params["sysctls"])
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        module.fail_json(msg=f"cannot read fabric link state: {exc}")
    for w in warnings:
        module.warn(w)
    module.exit_json(changed=False, links=links, sysctls=sysctls)


if __name__ == "__main__":
    main()
