#!/usr/bin/python
"""Ansible module ``switch_port_mtu``; run as a script, the boot-time re-apply.

One implementation for both paths: the role runs it as a module (live change,
check mode, diff) and installs the same file on the switch, where a oneshot
systemd unit runs ``python3 switch_port_mtu.py --state-file FILE`` at boot.
The logic is plain functions over a sysfs root so tests can fake sysfs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

try:
    from ansible.module_utils.basic import AnsibleModule
except ImportError:  # script mode on the switch: no Ansible there
    AnsibleModule = None

DOCUMENTATION = r"""
---
module: switch_port_mtu
short_description: Set the MTU of Linux switch ports, and of their bridges, live
description:
  - Reads each port's MTU from C(<sysfs_root>/<port>/mtu) and runs
    C(ip link set dev <port> mtu <mtu>) only for ports that differ.
  - Then brings every bridge a port is enslaved to (C(<sysfs_root>/<port>/master))
    to the same MTU. The kernel lowers or raises a bridge whose MTU was never set
    by hand to the smallest MTU of its ports by itself; the module sets the bridge
    only when it still differs after the ports changed.
  - Fails when a port does not exist, or when a device does not carry the MTU
    after the change (for example a driver whose maximum MTU is lower).
  - >-
    Run as C(python3 switch_port_mtu.py --state-file FILE) (no Ansible needed), it
    applies C({"mtu": N, "ports": [...]}) from FILE and skips absent ports with a
    warning; the switch_mtu role's systemd unit does this at boot.
version_added: "0.1.0"
author: sparkctl developers
options:
  ports:
    description: Switch ports (network interface names) to set.
    type: list
    elements: str
    required: true
  mtu:
    description: MTU for the ports and their bridges.
    type: int
    required: true
  sysfs_root:
    description: Where network devices appear in sysfs; only tests change it.
    type: path
    default: /sys/class/net
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Jumbo frames on the fabric ports
  switch_port_mtu:
    ports: [swp1, swp2]
    mtu: 9216
"""

RETURN = r"""
ports:
  description: Per port, MTU before and after (predicted in check mode) and its bridge.
  returned: always
  type: dict
  sample: {"swp1": {"before": 1500, "after": 9216, "master": "br-a"}}
bridges:
  description: Per bridge that holds one of the ports, MTU before and after.
  returned: always
  type: dict
  sample: {"br-a": {"before": 1500, "after": 9216}}
commands:
  description: The C(ip) commands run (or, in check mode, that would run).
  returned: always
  type: list
  elements: list
"""

SYSFS_NET = "/sys/class/net"
# A Linux interface name (the role's filter checks the same before any contact):
# at most 15 bytes (IFNAMSIZ with its NUL), no '/', ':' or blanks (the kernel's
# dev_valid_name), and no leading '-' or '.': the name is both an `ip` argument
# and a path under sysfs, and the state file read at boot could be edited.
IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}\Z")

Runner = Callable[[list[str]], None]


class PortMtuError(Exception):
    """A port is missing or a device refused the MTU."""


def read_mtu(root: Path, dev: str) -> int:
    return int((root / dev / "mtu").read_text().strip())


def bridge_of(root: Path, dev: str) -> str | None:
    """The bridge ``dev`` is enslaved to (sysfs ``master`` link), or None."""
    link = root / dev / "master"
    if not link.is_symlink():
        return None
    master = link.readlink().name
    return master if (root / master / "bridge").is_dir() else None


def ip_set_mtu(dev: str, mtu: int) -> list[str]:
    return ["ip", "link", "set", "dev", dev, "mtu", str(mtu)]


def apply(
    ports: Iterable[str],
    mtu: int,
    *,
    root: Path,
    run: Runner,
    check_mode: bool,
    skip_missing: bool = False,
) -> dict[str, Any]:
    """Bring ``ports`` and their bridges to ``mtu``; return what was (or would be) done.

    Ports first, then bridges: a bridge's MTU follows its ports unless someone set
    it by hand, so it is read again after the ports changed.
    """
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 65535:
        raise PortMtuError(f"mtu {mtu!r} is not an integer in 68..65535")
    names = list(dict.fromkeys(ports))
    bad = [p for p in names if not isinstance(p, str) or not IFNAME.match(p)]
    if bad:
        raise PortMtuError(
            f"not a Linux interface name: {bad[0]!r} (1-15 letters, digits, _ . -); "
            "check switch_ports"
        )
    missing = [p for p in names if not (root / p).is_dir()]
    if missing and not skip_missing:
        raise PortMtuError(
            f"no such port on the switch: {', '.join(missing)} "
            f"(not under {root}); check switch_ports"
        )
    present = [p for p in names if p not in missing]

    port_state: dict[str, dict[str, Any]] = {
        p: {"before": read_mtu(root, p), "after": mtu, "master": bridge_of(root, p)}
        for p in present
    }
    bridges = sorted({str(s["master"]) for s in port_state.values() if s["master"]})
    bridge_state: dict[str, dict[str, Any]] = {
        b: {"before": read_mtu(root, b), "after": mtu} for b in bridges
    }
    commands: list[list[str]] = []

    for port, state in port_state.items():
        if state["before"] != mtu:
            commands.append(ip_set_mtu(port, mtu))
            if not check_mode:
                run(commands[-1])
    for bridge, state in bridge_state.items():
        current = state["before"] if check_mode else read_mtu(root, bridge)
        if current != mtu:
            commands.append(ip_set_mtu(bridge, mtu))
            if not check_mode:
                run(commands[-1])

    if not check_mode:
        for dev, state in [*port_state.items(), *bridge_state.items()]:
            state["after"] = read_mtu(root, dev)
        wrong = [
            f"{d} has {s['after']}"
            for d, s in [*port_state.items(), *bridge_state.items()]
            if s["after"] != mtu
        ]
        if wrong:
            raise PortMtuError(f"MTU {mtu} did not stick: {', '.join(wrong)}")

    changed = any(s["before"] != s["after"] for s in [*port_state.values(), *bridge_state.values()])
    return {
        "changed": changed,
        "ports": port_state,
        "bridges": bridge_state,
        "commands": commands,
        "missing": missing,
    }


def diff_text(result: dict[str, Any], key: str) -> str:
    lines = [
        f"{dev} mtu {state[key]}\n"
        for group in ("ports", "bridges")
        for dev, state in result[group].items()
    ]
    return "".join(lines)


# ------------------------------------------------------------------ module
def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "ports": {"type": "list", "elements": "str", "required": True},
            "mtu": {"type": "int", "required": True},
            "sysfs_root": {"type": "path", "default": SYSFS_NET},
        },
        supports_check_mode=True,
    )
    mtu = module.params["mtu"]
    if not 68 <= mtu <= 65535:
        module.fail_json(msg=f"mtu {mtu} is outside 68..65535")
    ip = module.get_bin_path("ip", required=True)

    def run(cmd: list[str]) -> None:
        module.run_command([ip, *cmd[1:]], check_rc=True)

    try:
        result = apply(
            module.params["ports"],
            mtu,
            root=Path(module.params["sysfs_root"]),
            run=run,
            check_mode=module.check_mode,
        )
    except (PortMtuError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    result.pop("missing")
    if module._diff:
        result["diff"] = {
            "before": diff_text(result, "before"),
            "after": diff_text(result, "after"),
            "before_header": "MTU",
            "after_header": "MTU",
        }
    module.exit_json(**result)


# ------------------------------------------------------------------ script
def run_script(state_file: str) -> int:
    """Boot-time re-apply of the state the role wrote; absent ports are skipped."""
    state = json.loads(Path(state_file).read_text())

    def run(cmd: list[str]) -> None:
        subprocess.run(cmd, check=True)

    try:
        result = apply(
            state["ports"],
            int(state["mtu"]),
            root=Path(SYSFS_NET),
            run=run,
            check_mode=False,
            skip_missing=True,
        )
    except (PortMtuError, OSError, ValueError, subprocess.CalledProcessError) as exc:
        print(f"switch_port_mtu: {exc}", file=sys.stderr)
        return 1
    if result["missing"]:
        print(
            f"switch_port_mtu: ports not present, skipped: {', '.join(result['missing'])}",
            file=sys.stderr,
        )
    for cmd in result["commands"]:
        print(" ".join(cmd))
    return 0


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[1] == "--state-file":
        sys.exit(run_script(argv[2]))
    if AnsibleModule is None:
        print(f"usage: {argv[0]} --state-file FILE", file=sys.stderr)
        sys.exit(2)
    run_module()


if __name__ == "__main__":
    main(sys.argv)
