#!/usr/bin/python
"""Ansible module: read files and run read-only commands on a node, in one call.

The verify steps of sparkctl's roles read many small things (a few files, their
owners and modes, the output of ``systemctl show``, a ``--help``): as separate
stat/slurp/command tasks that is one remote round trip each on every run, and
on a four-node cluster most of a no-change provision. This module does them
in one and returns raw text; the roles parse it on the controller with their
tested filters and assert there (systemctl's and dpkg-query's output, which
it reads itself, through sparkctl's one parser of tool output,
the collection's module_utils tool_output). It never changes anything. Every sparkctl
role depends on cluster_defaults, so the module is on the module path wherever
a role needs it.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
import subprocess
from pathlib import Path
from typing import Any

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    dpkg_query,
    systemctl_show_units,
)

DOCUMENTATION = r"""
---
module: sparkctl_probe
short_description: Read files and run read-only commands on a node in one call
description:
  - For each of I(files), returns whether it exists, its type, mode, owner,
    group, whether it is executable, and its SHA-256; for those also listed in
    I(read), its text.
  - Runs each command of I(commands) (name -> argv, no shell) and returns its
    exit code, standard output and standard error.
  - Never changes anything; supports check mode.
options:
  files:
    description: Paths to look at.
    type: list
    elements: path
    default: []
  read:
    description: Paths (also looked at) whose text is returned. Never list a secret here.
    type: list
    elements: path
    default: []
  secrets:
    description: >-
      Paths looked at like I(files) but without a hash (a hash of a file that
      holds a short key would let anyone with the run's artifacts test guesses).
    type: list
    elements: path
    default: []
  commands:
    description: Name -> argv of read-only commands.
    type: dict
    default: {}
  users:
    description: Account names to look up (exists, uid, gid, group, home, shell).
    type: list
    elements: str
    default: []
  units:
    description: systemd units whose load, active and unit-file states are returned.
    type: list
    elements: str
    default: []
  packages:
    description: >-
      Also return the installed dpkg packages as the fact C(packages), in
      C(ansible.builtin.package_facts)' shape (plus C(selection), hold or install),
      so a role needs no separate package_facts round trip.
    type: bool
    default: false
  timeout:
    description: Seconds each command may take.
    type: int
    default: 60
  max_output:
    description: Characters of each output kept (the start).
    type: int
    default: 65536
author: sparkctl developers
"""

RETURN = r"""
files:
  description: >-
    path -> {exists, isreg, isdir, executable, mode ("0644"), owner, group, sha256, content};
    content only for paths in read, sha256 only for regular files.
  type: dict
  returned: always
commands:
  description: name -> {rc, stdout, stderr}; rc 127 when the program is missing, 124 on timeout.
  type: dict
  returned: always
users:
  description: name -> {exists, uid, gid, group (the primary group's name), home, shell}.
  type: dict
  returned: always
units:
  description: >-
    unit -> {LoadState, ActiveState, SubState, UnitFileState, FragmentPath, Result}
    as systemctl show reports them (empty strings where systemd is not running).
  type: dict
  returned: always
ansible_facts:
  description: C(packages) when I(packages) is true.
  type: dict
  returned: when packages is true
"""

UNIT_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "FragmentPath",
    "Result",
)


def _name(lookup: Any, ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return str(ident)


def look(path: Path, read: bool, digest: bool = True) -> dict[str, Any]:
    """What the roles assert about a file, from one stat (symlinks followed)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return {"exists": False}
    info: dict[str, Any] = {
        "exists": True,
        "isreg": stat.S_ISREG(st.st_mode),
        "isdir": stat.S_ISDIR(st.st_mode),
        "executable": stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK),
        "mode": f"{stat.S_IMODE(st.st_mode):04o}",
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
    }
    if info["isreg"] and digest:
        data = path.read_bytes()
        info["sha256"] = hashlib.sha256(data).hexdigest()
        if read:
            info["content"] = data.decode("utf-8", errors="replace")
    return info


def run(argv: list[str], timeout: int, limit: int) -> dict[str, Any]:
    """rc/stdout/stderr of one command; a missing program is rc 127, a timeout rc 124."""
    if not argv or not all(isinstance(a, str) for a in argv):
        return {"rc": 2, "stdout": "", "stderr": f"not an argv: {argv!r}"}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, errors="replace"
        )
    except FileNotFoundError as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    except PermissionError as exc:
        return {"rc": 126, "stdout": "", "stderr": str(exc)}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": f"{argv[0]} did not finish within {timeout} s"}
    return {"rc": proc.returncode, "stdout": proc.stdout[:limit], "stderr": proc.stderr[:limit]}


def user(name: str) -> dict[str, Any]:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"exists": False}
    return {
        "exists": True,
        "uid": entry.pw_uid,
        "gid": entry.pw_gid,
        "home": entry.pw_dir,
        "shell": entry.pw_shell,
        "group": _name(grp.getgrgid, entry.pw_gid),
    }


def probe(  # noqa: PLR0917
    files: list[str],
    read: list[str],
    commands: dict[str, list[str]],
    timeout: int = 60,
    limit: int = 65536,
    users: list[str] | None = None,
    units: list[str] | None = None,
    packages: bool = False,
    secrets: list[str] | None = None,
) -> dict[str, Any]:
    hidden = set(secrets or [])
    if hidden & set(read):
        raise ValueError(f"listed both as secret and to read: {sorted(hidden & set(read))}")
    wanted = list(dict.fromkeys([*files, *read, *hidden]))
    result: dict[str, Any] = {
        "files": {p: look(Path(p), p in read, p not in hidden) for p in wanted},
        "commands": {
            name: run([str(a) for a in argv] if isinstance(argv, list) else argv, timeout, limit)
            for name, argv in commands.items()
        },
        "users": {name: user(name) for name in users or []},
        "units": {},
    }
    if units:
        shown = run(
            ["systemctl", "show", "--no-pager", "-p", ",".join(UNIT_PROPERTIES), *units],
            timeout,
            1 << 20,
        )
        result["units"] = systemctl_show_units(
            shown["stdout"] if shown["rc"] == 0 else "", list(units), list(UNIT_PROPERTIES)
        )
    if packages:
        listed = run(
            [
                "dpkg-query",
                "-W",
                "-f",
                "${Package}\t${Version}\t${Architecture}\t${db:Status-Abbrev}\n",
            ],
            timeout,
            1 << 24,
        )
        if listed["rc"] != 0:
            raise OSError(f"dpkg-query: {listed['stderr'].strip()}")
        result["ansible_facts"] = {"packages": dpkg_query(listed["stdout"])}
    return result


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415 (tests import without it)

    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "path", "default": []},
            "read": {"type": "list", "elements": "path", "default": []},
            "commands": {"type": "dict", "default": {}},
            "timeout": {"type": "int", "default": 60},
            "max_output": {"type": "int", "default": 65536},
            "users": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "packages": {"type": "bool", "default": False},
            "secrets": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = probe(
            p["files"],
            p["read"],
            p["commands"],
            p["timeout"],
            p["max_output"],
            p["users"],
            p["units"],
            p["packages"],
            p["secrets"],
        )
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
