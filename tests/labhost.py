"""Helpers for lab tests: a snapshot of what the lab may touch on the host, and
commands on lab hosts over SSH with the lab's key and strict host key checking."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sparkctl_lab.lab import MGMT_IF, NETWORK
from sparkctl_lab.podman import CONTAINERS_CONF, Podman

STATE = Path(os.environ.get("SPARKCTL_STATE_DIR", Path.home() / ".local/state/sparkctl"))
SSH_DIR = STATE / "lab" / "ssh"


def _out(cmd: list[str]) -> str:
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    return subprocess.run(
        cmd, capture_output=True, text=True, check=False, env=env, stdin=subprocess.DEVNULL
    ).stdout


# Firewall rules a fault test inserts on the controller carry this comment, so
# a run killed before its ``finally`` (CI machines are reused) leaves nothing
# that the next session cannot recognise and remove before it starts.
FAULT_RULE_COMMENT = "sparkctl-fault-test"


def fault_rule(chain: str, match: list[str], target: list[str]) -> list[str]:
    """An ``iptables`` rule body (chain first) tagged as a fault test's own."""
    return [chain, *match, "-m", "comment", "--comment", FAULT_RULE_COMMENT, *target]


def remove_stale_fault_rules() -> list[str]:
    """Delete the fault-test rules an interrupted run left behind; return them."""
    if not shutil.which("iptables-save"):
        return []
    stale = [
        line
        for line in _out(["iptables-save"]).splitlines()
        if line.startswith("-A ") and f"--comment {FAULT_RULE_COMMENT}" in line
    ]
    for line in stale:
        subprocess.run(["iptables", "-D", *line.split()[1:]], check=True)
    return stale


# netavark's iptables driver (podman's network backend) creates these chains and their
# jumps the first time any container joins a bridge network on the host, and keeps
# them when the last network goes (containers/netavark PR #226, "do not remove
# NETAVARK_FORWARD rule on teardown"; PR #183, the HOSTPORT masquerade rule), nor the
# tables' frames iptables-save then prints. They are
# the host's, whoever started that first container (a lab or a molecule instance), so
# a lab leaves nothing behind as long as no rule of its own networks is left: those
# are the per-network NETAVARK-<id> chains and their rules, which stay compared.
_NETAVARK_BASE = re.compile(
    r"NETAVARK(?:_FORWARD|_INPUT|_ISOLATION_\d|-HOSTPORT-(?:DNAT|MASQ|SETMARK))\b"
)
_TABLE_FRAME = re.compile(
    r"^(?:\*\w+|COMMIT|:(?:INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) \w+ ?.*)$"
)


@dataclass(frozen=True)
class HostSnapshot:
    """Host-side state a lab creates: links, containers, networks, firewall rules."""

    links: frozenset[str]
    containers: frozenset[str]
    networks: frozenset[str]
    firewall: tuple[str, ...]

    @classmethod
    def take(cls) -> HostSnapshot:
        links = frozenset(d["ifname"] for d in json.loads(_out(["ip", "-j", "link"]) or "[]"))
        containers = frozenset(_out(["podman", "ps", "-a", "--format", "{{.Names}}"]).split())
        networks = frozenset(_out(["podman", "network", "ls", "--format", "{{.Name}}"]).split())
        rules: list[str] = []
        if shutil.which("iptables-save"):
            for line in _out(["iptables-save"]).splitlines():
                if line.startswith("#") or _NETAVARK_BASE.search(line) or _TABLE_FRAME.match(line):
                    continue
                rules.append(re.sub(r"\[\d+:\d+\]", "", line))
        if shutil.which("nft"):
            # sparkctl's own nft tables (the lab's egress guard); the iptables-nft
            # tables podman's netavark creates stay after every network is gone.
            rules += [t for t in _out(["nft", "list", "tables"]).splitlines() if "sparkctl" in t]
        return cls(links, containers, networks, tuple(rules))


def macs(names: list[str]) -> dict[str, str]:
    """The MAC of each named lab host's management NIC, read through podman rather than
    SSH, so a stale ARP entry cannot hang the read, and that of the lab's bridge on the
    controller ("controller")."""
    podman = Podman()
    found = {
        name: podman.exec(name, ["cat", f"/sys/class/net/{MGMT_IF}/address"]).stdout.strip()
        for name in names
    }
    bridge = podman.network_interface(NETWORK)
    found["controller"] = Path(f"/sys/class/net/{bridge}/address").read_text().strip()
    return found


def ssh(
    host_ip: str, command: str, *, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on a lab host as root over SSH, strict host key checking on."""
    proc = subprocess.run(
        [
            "ssh",
            "-i",
            str(SSH_DIR / "id_ed25519"),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={SSH_DIR / 'known_hosts'}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            f"root@{host_ip}",
            command,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{host_ip}: `{command}` exited {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc


# ------------------------------------------------------------- fault tests
# What a fault test compares before and after a sparkctl command: the live state
# sparkctl could change on the nodes and the switch. Volatile values (counters,
# lifetimes, IPv6 link-local addresses) are left out so two snapshots of an
# untouched cluster are equal.
_NODE_STATE = (
    "ip -j addr; echo '@@'; "
    "find /etc/netplan /etc/sparkctl /etc/systemd/system /etc/ssh/ssh_known_hosts "
    "-maxdepth 1 -type f \\( -path '/etc/netplan/*' -o -path '/etc/sparkctl/*' "
    "-o -name 'sparkctl-*' -o -name ssh_known_hosts \\) -exec sha256sum {} + | sort -k2; "
    "echo '@@'; systemctl is-active sparkctl-sglang.service || true; echo '@@'; "
    "find /var/lib/sparkctl/models -type f -printf '%p %s %T@\\n' 2>/dev/null | sort; true"
)
_SWITCH_STATE = "ip -j link; echo '@@'; tc qdisc show | sort"


def corrupt_in_place(host_ip: str, path: str, offset: int, byte: str) -> None:
    """Overwrite one byte of ``path`` on a lab host and put its mtime back: its size and
    mtime are what they were (silent corruption, which a quick check trusts)."""
    ssh(
        host_ip,
        f"t=$(stat -c %y {path}) && printf '{byte}' | dd of={path} bs=1 seek={offset} "
        f'conv=notrunc status=none && touch -d "$t" {path}',
    )


def _links(text: str, *, addresses: bool) -> dict[str, object]:
    out: dict[str, object] = {}
    for link in json.loads(text or "[]"):
        if link.get("ifname") == "lo":
            continue
        entry: dict[str, object] = {
            "mtu": link.get("mtu"),
            "state": link.get("operstate"),
            "flags": sorted(f for f in link.get("flags", []) if f in ("UP", "LOWER_UP")),
        }
        if addresses:
            entry["inet"] = sorted(
                f"{a['local']}/{a['prefixlen']}"
                for a in link.get("addr_info", [])
                if a.get("family") == "inet"
            )
        out[link["ifname"]] = entry
    return out


def cluster_state(nodes: dict[str, str], switch: str) -> dict[str, object]:
    """Live state of every node (name -> mgmt address) and the switch, in one ssh each."""
    state: dict[str, object] = {}
    for name, ip in nodes.items():
        parts = ssh(ip, _NODE_STATE).stdout.split("@@\n")
        state[name] = {
            "links": _links(parts[0], addresses=True),
            "files": parts[1].splitlines(),
            "sglang": parts[2].strip(),
            "models": parts[3].splitlines(),
        }
    links, qdiscs = ssh(switch, _SWITCH_STATE).stdout.split("@@\n")
    # `qdisc tbf 8003: root ...`: the handle is new each time a rate is set again
    state["switch"] = {
        "links": _links(links, addresses=False),
        "qdisc": [re.sub(r"^(qdisc \S+) \S+:", r"\1", q) for q in qdiscs.splitlines()],
    }
    return state


def state_diff(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """Human-readable differences between two cluster_state() snapshots ([] when equal)."""
    diffs: list[str] = []

    def walk(a: object, b: object, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                walk(a.get(key), b.get(key), f"{where}/{key}")
        elif (
            isinstance(a, list)
            and isinstance(b, list)
            and all(isinstance(x, str) for x in [*a, *b])
        ):
            for gone in sorted(set(a) - set(b)):
                diffs.append(f"{where}: - {gone}")
            for new in sorted(set(b) - set(a)):
                diffs.append(f"{where}: + {new}")
        elif a != b:
            diffs.append(f"{where}: {a!r} -> {b!r}")

    walk(before, after, "")
    return diffs
