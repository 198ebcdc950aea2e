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

from sparkctl.lab.podman import CONTAINERS_CONF

STATE = Path(os.environ.get("SPARKCTL_STATE_DIR", Path.home() / ".local/state/sparkctl"))
SSH_DIR = STATE / "lab" / "ssh"


def _out(cmd: list[str]) -> str:
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=env).stdout


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
                if line.startswith("#"):
                    continue
                rules.append(re.sub(r"\[\d+:\d+\]", "", line))
        return cls(links, containers, networks, tuple(rules))


def ssh(host_ip: str, command: str, *, check: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on a lab host as root over SSH, strict host key checking on."""
    proc = subprocess.run(
        ["ssh", "-i", str(SSH_DIR / "id_ed25519"), "-o", "IdentitiesOnly=yes",
         "-o", f"UserKnownHostsFile={SSH_DIR / 'known_hosts'}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
         f"root@{host_ip}", command],
        capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{host_ip}: `{command}` exited {proc.returncode}: "
                             f"{proc.stderr.strip()}")
    return proc
