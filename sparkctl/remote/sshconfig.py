"""An ssh_config for the node checks and the NCCL launch, from the plan's connections.

Each node's connection as Ansible resolved it (``sparkctl_connection`` in
playbooks/group_vars/all/connection.yml, carried by the plan: ``ansible_host``,
``ansible_user``, ``ansible_port``, ``ansible_ssh_private_key_file``, ``-o``
options in ``ansible_ssh_common_args``, ``sparkctl_known_hosts_file``) becomes one
``Host`` entry, so validate and serve connect exactly as provision does; this
module decides nothing about the connection, it refuses what an ssh_config line
cannot hold and adds sparkctl's own options. Host key
checking stays strict whatever the inventory says, and every entry shares one
ControlMaster per host: one SSH connection per node for the whole run.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkctl import paths
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.rules import common, connection
from sparkctl.rules.formats import FORMATS

# Options sparkctl sets itself; an inventory cannot weaken them.
_FORCED = {"stricthostkeychecking": "yes", "batchmode": "yes", "passwordauthentication": "no"}
_OURS = {
    "controlmaster",
    "controlpath",
    "controlpersist",
    "identitiesonly",
    "userknownhostsfile",
    *_FORCED,
}


# OpenSSH refuses a ControlPath whose length plus its 17-byte temporary suffix does not
# fit sun_path (108 bytes); %C expands to 40 hex digits after the directory.
_MAX_DIR = 108 - 1 - 17 - 41


def control_dir() -> Path:
    """Where the ControlMaster sockets live: ``ssh-cm`` in the user's state dir, or, when
    that is too deep for a socket path, ``sparkctl-cm-UID`` in the temporary directory.
    Either is created 0700 and must be a directory of this user, not a link: another user
    could have made /tmp/sparkctl-cm-UID first, to watch or replace the sockets."""
    path = paths.state_dir() / "ssh-cm"
    if len(os.fsencode(path)) > _MAX_DIR:
        path = Path(tempfile.gettempdir()) / f"sparkctl-cm-{os.getuid()}"
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise SparkctlError(
            f"{path}: not a directory of this user (uid {os.getuid()}); "
            "sparkctl keeps its SSH control sockets there",
            ExitCode.ENVIRONMENT,
            hint=f"remove {path} and run again",
        )
    if info.st_mode & 0o077:
        path.chmod(0o700)
    return path


def _options(args: str, source: str, host: str) -> list[tuple[str, str]]:
    """The options of an ssh argument string, by the inventory rules' own parser (which
    `inventory check` ran already; a value it refuses is refused here too)."""
    try:
        return connection.ssh_options(args)
    except ValueError as exc:
        raise SparkctlError(
            f"host {host}: variable {source}: {exc}",
            ExitCode.BAD_INPUT,
            hint="see docs/inventory.md, connection variables",
        ) from None


def inventory_options(name: str, hostvars: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``-o`` options of a host's ``ansible_ssh_common_args`` (its
    ``ansible_ssh_extra_args`` is sparkctl's own: the known_hosts file below)."""
    return _options(
        str(hostvars.get("ansible_ssh_common_args") or ""), "ansible_ssh_common_args", name
    )


DEFAULT_KNOWN_HOSTS = connection.DEFAULT_KNOWN_HOSTS


def known_hosts_file(name: str, hostvars: Mapping[str, Any]) -> Path:
    """The known_hosts file ssh records and checks ``name``'s host key in: the
    inventory's ``sparkctl_known_hosts_file``, else ssh's default
    ``~/.ssh/known_hosts`` (the one file every ssh of sparkctl and Ansible is given)."""
    value = connection.known_hosts(hostvars)
    if not FORMATS["ssh_file"][0](value):
        raise SparkctlError(
            f"host {name}: variable {connection.KNOWN_HOSTS_VAR}: {value!r} is not "
            f"{FORMATS['ssh_file'][1]}",
            ExitCode.BAD_INPUT,
            hint="run `sparkctl inventory check INVENTORY`",
        )
    return Path(value).expanduser()


def _word(host: str, var: str, value: Any, pattern: re.Pattern[str]) -> str:
    """``value`` as one ssh_config word, or the inventory rules' refusal (exit 2): a
    newline or a quote would start another line or option in the file."""
    text = str(value)
    if not pattern.fullmatch(text):
        raise SparkctlError(
            f"host {host}: variable {var}: {text!r} cannot go into an ssh_config",
            ExitCode.BAD_INPUT,
            hint="run `sparkctl inventory check INVENTORY`",
        )
    return text


def host_entry(name: str, hostvars: Mapping[str, Any]) -> list[str]:
    # ssh takes the first value it reads for an option: sparkctl's own come first.
    lines = [f"Host {_word(name, 'inventory_hostname', name, common.HOST_NAME)}"]
    lines += [
        f"  {k} {v}"
        for k, v in (
            ("StrictHostKeyChecking", "yes"),
            ("BatchMode", "yes"),
            ("PasswordAuthentication", "no"),
            ("ControlMaster", "auto"),
            ("ControlPersist", "300"),
            ("ControlPath", f"{control_dir()}/%C"),
            ("UserKnownHostsFile", str(known_hosts_file(name, hostvars))),
        )
    ]
    address = hostvars.get("ansible_host", name)
    if common.ipv4(address) is None:  # the rules' own address reader
        _word(name, "ansible_host", address, common.HOST_NAME)
    lines.append(f"  HostName {address}")
    if hostvars.get("ansible_user"):
        user = _word(name, "ansible_user", hostvars["ansible_user"], common.USER_NAME)
        lines.append(f"  User {user}")
    if hostvars.get("ansible_port"):
        port = connection.port_number(hostvars["ansible_port"])
        if port is None:
            raise SparkctlError(
                f"host {name}: variable ansible_port: "
                f"{hostvars['ansible_port']!r} is not a TCP port",
                ExitCode.BAD_INPUT,
            )
        lines.append(f"  Port {port}")
    for var in connection.KEY_FILE_VARS:
        if hostvars.get(var):
            key = Path(_word(name, var, hostvars[var], common.KEY_FILE)).expanduser()
            lines += [
                f"  IdentityFile {_word(name, var, key, common.KEY_FILE)}",
                "  IdentitiesOnly yes",
            ]
            break
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
