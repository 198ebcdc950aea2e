#!/usr/bin/python
"""Ansible module: the RoCE v2 IPv4 GID index of the fabric twins, parsed in Python.

NCCL_IB_GID_INDEX is one number for every HCA NCCL uses, so this module finds
the index of the RoCE v2 GID that carries each twin's IPv4 address and
insists that it is the same on every twin (3 in NVIDIA's perftest guide and
on the DGX Sparks seen so far; docs/reference.md, "The network": *verify*, do
not trust).

The GID table is read from sysfs (``/sys/class/infiniband/<dev>/ports/<p>/
gids/<i>`` with ``gid_attrs/types`` and ``gid_attrs/ndevs``) when the kernel
exposes RDMA devices, otherwise from ``show_gids`` (MLNX_OFED/DOCA script;
the rehearsal lab has a stand-in that prints its format from live state).
show_gids is read by sparkctl's one parser of tool output
(the collection's module_utils tool_output); the choice is made here, in
plain functions that the unit tests import.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import gid_to_ipv4
from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    show_gids as show_gids_rows,
)

DOCUMENTATION = r"""
---
module: roce_gid_index
short_description: RoCE v2 IPv4 GID index of the given netdevs (for NCCL_IB_GID_INDEX)
description:
  - Reads the RoCE GID table (sysfs when present, else show_gids), keeps the
    RoCE v2 entries whose GID is IPv4-mapped and whose netdev is one of
    I(netdevs), and returns their common index.
  - Fails when a netdev has no such GID (no IPv4 address on the twin yet; the
    fabric role must run first), when I(addresses) names an address the node
    does not carry, or when the twins disagree (NCCL takes one index).
  - Never changes anything; supports check mode.
options:
  netdevs:
    description: Netdevs whose RoCE v2 IPv4 GID index is wanted (the twins).
    type: list
    elements: str
    required: true
  addresses:
    description: >-
      Optional netdev -> IPv4 address the GID must carry (the inventory's
      fabric_a_ip/fabric_b_ip). Without it the lowest RoCE v2 IPv4 index wins.
    type: dict
    default: {}
  sysfs_root:
    description: Root of sysfs (tests).
    type: path
    default: /sys
  show_gids:
    description: show_gids command used when sysfs has no RDMA devices.
    type: str
    default: show_gids
author: sparkctl developers
"""

RETURN = r"""
index:
  description: The RoCE v2 IPv4 GID index common to all I(netdevs).
  type: int
  returned: success
per_netdev:
  description: netdev -> {ibdev, port, index, gid, ipv4}.
  type: dict
  returned: success
source:
  description: Where the GID table came from, C(sysfs) or C(show_gids).
  type: str
  returned: always
gids:
  description: The whole parsed GID table (dev, port, index, gid, ipv4, ver, ndev).
  type: list
  returned: always
"""

_EMPTY_GIDS = {"0000:0000:0000:0000:0000:0000:0000:0000", "fe80:0000:0000:0000:0000:0000:0000:0000"}
FABRIC_HINT = (
    "a twin without its IPv4 address has no such GID: run the roce_fabric role "
    "first (playbooks/roce_fabric.yml), which addresses both twins"
)


class GidError(Exception):
    """A GID table that does not give one usable RoCE v2 IPv4 index."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:  # unset GID slots answer EINVAL on gid_attrs
        return None


def _type_to_ver(text: str | None) -> str | None:
    """``RoCE v2`` -> ``v2``, ``IB/RoCE v1`` -> ``v1`` (as show_gids' grep -o "[Vv].*")."""
    if not text:
        return None
    pos = text.lower().find("v")
    return text[pos:].lower() if pos >= 0 else None


def read_sysfs_gids(sysfs_root: Path) -> list[dict[str, Any]]:
    """The GID table of every RDMA device under ``<sysfs>/class/infiniband``."""
    rows: list[dict[str, Any]] = []
    base = sysfs_root / "class" / "infiniband"
    for dev_dir in sorted(base.iterdir()) if base.is_dir() else []:
        ports = dev_dir / "ports"
        for port_dir in sorted(ports.iterdir(), key=lambda p: p.name) if ports.is_dir() else []:
            gids = port_dir / "gids"
            if not gids.is_dir() or not port_dir.name.isdigit():
                continue
            for gid_file in sorted(
                gids.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
            ):
                if not gid_file.name.isdigit():
                    continue
                gid = (_read(gid_file) or "").lower()
                if not gid or gid in _EMPTY_GIDS:
                    continue
                attrs = port_dir / "gid_attrs"
                ver = _type_to_ver(_read(attrs / "types" / gid_file.name))
                if ver is None:
                    continue
                rows.append(
                    {
                        "dev": dev_dir.name,
                        "port": int(port_dir.name),
                        "index": int(gid_file.name),
                        "gid": gid,
                        "ipv4": gid_to_ipv4(gid),
                        "ver": ver,
                        "ndev": _read(attrs / "ndevs" / gid_file.name) or None,
                    }
                )
    return rows


def select_index(
    rows: list[dict[str, Any]], netdevs: list[str], addresses: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """The one RoCE v2 IPv4 GID index shared by ``netdevs``; raises GidError otherwise."""
    addresses = addresses or {}
    chosen: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    unaddressed = False
    for netdev in netdevs:
        mine = [r for r in rows if r.get("ndev") == netdev]
        if not mine:
            problems.append(
                f"{netdev}: no GID at all (no RoCE device on this netdev, "
                "or the netdev does not exist)"
            )
            continue
        v2 = sorted(
            (r for r in mine if r["ver"] == "v2" and r.get("ipv4")), key=lambda r: r["index"]
        )
        want = addresses.get(netdev)
        if want:
            v2 = [r for r in v2 if r["ipv4"] == want]
        if not v2:
            what = f"for {want}" if want else "with an IPv4 address"
            problems.append(f"{netdev} ({mine[0]['dev']}): no RoCE v2 GID {what}")
            unaddressed = True
            continue
        row = v2[0]
        chosen[netdev] = {
            "ibdev": row["dev"],
            "port": row["port"],
            "index": row["index"],
            "gid": row["gid"],
            "ipv4": row["ipv4"],
        }
    if problems:
        raise GidError("; ".join(problems) + (f"; {FABRIC_HINT}" if unaddressed else ""))
    indexes = sorted({c["index"] for c in chosen.values()})
    if len(indexes) != 1:
        detail = ", ".join(f"{n}={c['index']}" for n, c in chosen.items())
        raise GidError(
            f"the twins' RoCE v2 IPv4 GID indexes differ ({detail}); NCCL takes one "
            "NCCL_IB_GID_INDEX for every HCA: set nccl_ib_gid_index to the right one "
            "or give each twin the same number of addresses"
        )
    return indexes[0], chosen


def read_table(sysfs_root: Path, show_gids: str) -> tuple[str, list[dict[str, Any]]]:
    """(source, rows): sysfs when the kernel lists RDMA devices, else ``show_gids``."""
    base = sysfs_root / "class" / "infiniband"
    if base.is_dir() and any(base.iterdir()):
        return "sysfs", read_sysfs_gids(sysfs_root)
    exe = shutil.which(show_gids)
    if exe is None:
        raise GidError(
            f"no RDMA devices in {base} and no {show_gids} command: is the "
            "ConnectX-7 driver (mlx5_ib) loaded?"
        )
    proc = subprocess.run([exe], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise GidError(f"{show_gids} exited {proc.returncode}: {proc.stderr.strip()}")
    return "show_gids", show_gids_rows(proc.stdout)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415 (tests import without it)

    module = AnsibleModule(
        argument_spec={
            "netdevs": {"type": "list", "elements": "str", "required": True},
            "addresses": {"type": "dict", "default": {}},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "show_gids": {"type": "str", "default": "show_gids"},
        },
        supports_check_mode=True,
    )
    source = "none"
    rows: list[dict[str, Any]] = []
    try:
        source, rows = read_table(Path(module.params["sysfs_root"]), module.params["show_gids"])
        index, per_netdev = select_index(
            rows,
            module.params["netdevs"],
            {k: str(v) for k, v in module.params["addresses"].items() if v},
        )
    except GidError as exc:
        module.fail_json(msg=f"{exc} (GID table from {source})", source=source, gids=rows)
    module.exit_json(changed=False, index=index, per_netdev=per_netdev, source=source, gids=rows)


if __name__ == "__main__":
    main()
