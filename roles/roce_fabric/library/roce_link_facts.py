#!/usr/bin/python
"""Ansible module: live state of the fabric twins, parsed in Python.

Reads, for each netdev: ``ethtool`` (speed, link detected), sysfs (MTU,
operstate), ``ip -j addr`` (IPv4 addresses), and ``ibdev2netdev`` (which RoCE
device maps to it and whether it is Up). Parsing lives in plain functions
that the unit tests import.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

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

_SPEED = re.compile(r"^\s*Speed:\s*(?P<speed>\d+)Mb/s\s*$", re.M)
_SPEED_UNKNOWN = re.compile(r"^\s*Speed:\s*Unknown!?\s*$", re.M)
_LINK = re.compile(r"^\s*Link detected:\s*(?P<link>yes|no)\s*$", re.M)
# ibdev2netdev: "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)"; -v adds PCI/board fields in front.
_IBDEV = re.compile(r"(?P<ibdev>\S+)(?:\s+\([^)]*\))?(?:\s+fw\s+\S+)?\s+port\s+(?P<port>\d+)"
                    r"(?:\s+\(\w+\))?\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>Up|Down)\)")


def parse_ethtool(text: str) -> dict[str, Any]:
    """Speed in Mb/s (None when unknown) and whether a link is detected."""
    speed = _SPEED.search(text)
    link = _LINK.search(text)
    if speed is None and _SPEED_UNKNOWN.search(text) is None:
        raise ValueError("ethtool output has no Speed line")
    return {"speed_mbps": int(speed.group("speed")) if speed else None,
            "link_detected": bool(link and link.group("link") == "yes")}


def parse_ibdev2netdev(text: str) -> dict[str, dict[str, str]]:
    """netdev -> {ibdev, port, state} from ibdev2netdev (plain or -v)."""
    result: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _IBDEV.search(line)
        if m:
            result[m.group("netdev")] = {"ibdev": m.group("ibdev").split()[-1],
                                         "port": m.group("port"), "state": m.group("state")}
    return result


def parse_ip_addr(text: str) -> dict[str, list[str]]:
    """netdev -> ["a.b.c.d/len", ...] from ``ip -j -4 addr show``."""
    out: dict[str, list[str]] = {}
    for dev in json.loads(text or "[]"):
        out[dev["ifname"]] = [f"{a['local']}/{a['prefixlen']}" for a in dev.get("addr_info", [])
                              if a.get("family") == "inet"]
    return out


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
    ib: dict[str, dict[str, str]] = {}
    if shutil.which("ibdev2netdev"):
        proc = subprocess.run(["ibdev2netdev"], capture_output=True, text=True, check=False)
        ib = parse_ibdev2netdev(proc.stdout)
    else:
        warnings.append("ibdev2netdev is not installed (MLNX OFED / DOCA tools)")
    addrs = parse_ip_addr(subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True,
                                         text=True, check=True).stdout)
    links: dict[str, Any] = {}
    for dev in netdevs:
        sysfs = Path("/sys/class/net") / dev
        if not sysfs.exists():
            links[dev] = {"present": False}
            continue
        eth = subprocess.run(["ethtool", dev], capture_output=True, text=True, check=False)
        info = parse_ethtool(eth.stdout)
        links[dev] = {
            "present": True,
            **info,
            "mtu": int((sysfs / "mtu").read_text()),
            "operstate": (sysfs / "operstate").read_text().strip(),
            "ipv4": addrs.get(dev, []),
            "ibdev": ib.get(dev, {}).get("ibdev"),
            "ibdev_state": ib.get(dev, {}).get("state"),
        }
    return links, warnings


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415

    module = AnsibleModule(argument_spec={"netdevs": {"type": "list", "elements": "str",
                                                      "required": True},
                                          "sysctls": {"type": "list", "elements": "str",
                                                      "default": []}},
                           supports_check_mode=True)
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
