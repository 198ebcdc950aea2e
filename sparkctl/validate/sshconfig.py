"""An ssh_config for the node checks and the NCCL launch, from the inventory.

Ansible's connection variables (``ansible_host``, ``ansible_user``,
``ansible_port``, ``ansible_ssh_private_key_file``, ``-o`` options in
``ansible_ssh_common_args``/``ansible_ssh_extra_args``) become one ``Host``
entry per node, so validate connects exactly as provision does. Host key
checking stays strict whatever the inventory says, and every entry shares one
ControlMaster per host: one SSH connection per node for the whole run.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError

# Options sparkctl sets itself; an inventory cannot weaken them.
_FORCED = {"stricthostkeychecking": "yes", "batchmode": "yes", "passwordauthentication": "no"}
_OURS = {"controlmaster", "controlpath", "controlpersist", "identitiesonly", *_FORCED}


def control_dir() -> Path:
    """Where the ControlMaster sockets live: short (sun_path is 108 bytes), private."""
    path = Path(tempfile.gettempdir()) / f"sparkctl-cm-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
    return path


def _options(args: str, source: str, host: str) -> list[tuple[str, str]]:
    """``-o Key=Value`` / ``-oKey=Value`` / ``-o Key Value`` pairs of an ssh argument string."""
    out: list[tuple[str, str]] = []
    try:
        words = shlex.split(args or "")
    except ValueError as exc:
        raise SparkctlError(f"host {host}: variable {source}: {exc} in {args!r}",
                            ExitCode.BAD_INPUT) from None
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-o" and i + 1 < len(words):
            spec, i = words[i + 1], i + 2
        elif word.startswith("-o") and len(word) > 2:
            spec, i = word[2:], i + 1
        else:
            raise SparkctlError(f"host {host}: variable {source}: sparkctl reads only -o options "
                                f"from it, not {word!r}", ExitCode.BAD_INPUT)
        parts = re.split(r"[=\s]+", spec.strip(), maxsplit=1)
        key, value = parts[0], parts[1] if len(parts) > 1 else ""
        if not re.fullmatch(r"[A-Za-z]+", key) or re.search(r"[\x00-\x1f\x7f]", value):
            raise SparkctlError(f"host {host}: variable {source}: {spec!r} is not an ssh option "
                                "(-o Key=Value, no control characters)", ExitCode.BAD_INPUT)
        out.append((key, value))
    return out


def inventory_options(name: str, hostvars: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``-o`` options of a host's ``ansible_ssh_common_args`` then ``_extra_args``."""
    return [pair for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args")
            for pair in _options(str(hostvars.get(var) or ""), var, name)]


DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


def known_hosts_file(name: str, hostvars: Mapping[str, Any]) -> Path:
    """The known_hosts file ssh records and checks ``name``'s host key in.

    The first ``UserKnownHostsFile`` of the inventory's ssh options (ssh takes
    the first value it reads, and writes to the first file of a list), else
    ssh's default ``~/.ssh/known_hosts``.
    """
    value = next((v for k, v in inventory_options(name, hostvars)
                  if k.lower() == "userknownhostsfile"), DEFAULT_KNOWN_HOSTS)
    first = (shlex.split(value) or [DEFAULT_KNOWN_HOSTS])[0]
    if first.lower() == "none" or first == os.devnull:
        raise SparkctlError(f"host {name}: UserKnownHostsFile {first}: its host key would never "
                            "be checked", ExitCode.BAD_INPUT,
                            hint="point UserKnownHostsFile at a file, or leave it out "
                                 f"({DEFAULT_KNOWN_HOSTS})")
    return Path(first.replace("%d", str(Path.home()))).expanduser()


def host_entry(name: str, hostvars: Mapping[str, Any]) -> list[str]:
    # ssh takes the first value it reads for an option: sparkctl's own come first.
    lines = [f"Host {name}"]
    lines += [f"  {k} {v}" for k, v in
              (("StrictHostKeyChecking", "yes"), ("BatchMode", "yes"),
               ("PasswordAuthentication", "no"), ("ControlMaster", "auto"),
               ("ControlPersist", "300"), ("ControlPath", f"{control_dir()}/%C"))]
    lines.append(f"  HostName {hostvars.get('ansible_host', name)}")
    if hostvars.get("ansible_user"):
        lines.append(f"  User {hostvars['ansible_user']}")
    if hostvars.get("ansible_port"):
        lines.append(f"  Port {int(hostvars['ansible_port'])}")
    key = hostvars.get("ansible_ssh_private_key_file") or hostvars.get("ansible_private_key_file")
    if key:
        lines += [f"  IdentityFile {Path(str(key)).expanduser()}", "  IdentitiesOnly yes"]
    for opt, value in inventory_options(name, hostvars):
        if opt.lower() in _OURS:
            continue
        lines.append(f"  {opt} {value}")
    lines += ["  ConnectTimeout 10", "  ServerAliveInterval 10", "  ServerAliveCountMax 3"]
    return lines


def write(path: Path, hostvars: Mapping[str, Mapping[str, Any]], hosts: list[str]) -> Path:
    text = "# Written by sparkctl validate from the inventory's connection variables.\n"
    text += "\n".join("\n".join(host_entry(h, hostvars[h])) + "\n" for h in hosts)
    path.write_text(text)
    path.chmod(0o600)
    return path
