#!/usr/bin/python
"""Ansible module: a set of directories and small files, compared and written in one call.

Every sparkctl role depends on cluster_defaults, so this module is on the
module path wherever a role needs it. It exists for speed: a ``copy`` or
``file`` loop costs one remote round trip per item on every run, which on a
four-node cluster was most of a no-change provision. Here the whole set is
compared at once and only what differs is written (atomically: a running
mpirun or server never sees a half-written file). The comparison and the
writing are plain functions that the unit tests import.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

DOCUMENTATION = r"""
---
module: sparkctl_files
short_description: Directories and small files, compared and written in one call
description:
  - Creates each of I(directories) (and parents) with mode 0755 when missing,
    then writes each of I(files) whose content or mode differs.
  - Files are owned by the connecting user (root in every sparkctl role).
  - Supports check mode and diff mode.
options:
  directories:
    description: Absolute directory paths.
    type: list
    elements: path
    default: []
  files:
    description: Files as C(path), C(content) (text) and C(mode) (octal string, default 0644).
    type: list
    elements: dict
    default: []
author: sparkctl developers
"""

RETURN = r"""
changed_paths:
  description: Directories made and files written (or that would be, in check mode).
  type: list
  returned: always
"""


def normalise(files: list[dict[str, Any]]) -> list[tuple[Path, bytes, int]]:
    """(path, bytes, mode) of each file; refuses relative paths and bad modes."""
    out: list[tuple[Path, bytes, int]] = []
    for entry in files:
        path = Path(str(entry.get("path", "")))
        if not path.is_absolute():
            raise ValueError(f"file path {str(path)!r} is not absolute")
        mode_text = str(entry.get("mode", "0644"))
        try:
            mode = int(mode_text, 8)
        except ValueError:
            raise ValueError(f"{path}: mode {mode_text!r} is not octal") from None
        if not 0 <= mode <= 0o7777:
            raise ValueError(f"{path}: mode {mode_text!r} out of range")
        content = entry.get("content")
        if not isinstance(content, str):
            raise ValueError(f"{path}: content must be text")
        out.append((path, content.encode(), mode))
    return out


def file_differs(path: Path, data: bytes, mode: int) -> bool:
    """True when ``path`` is missing, not a regular file, or has other bytes or mode."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode:
        return True
    return st.st_size != len(data) or path.read_bytes() != data


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` atomically with ``data`` at ``mode``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def plan(directories: list[str],
         files: list[tuple[Path, bytes, int]]) -> tuple[list[Path], list[Path]]:
    """(directories to make, files to write)."""
    dirs = [Path(d) for d in directories]
    for d in dirs:
        if not d.is_absolute():
            raise ValueError(f"directory {str(d)!r} is not absolute")
    return ([d for d in dirs if not d.is_dir()],
            [path for path, data, mode in files if file_differs(path, data, mode)])


def apply(make: list[Path], write: list[Path], files: list[tuple[Path, bytes, int]]) -> None:
    for d in make:
        d.mkdir(mode=0o755, parents=True, exist_ok=True)
    wanted = {path: (data, mode) for path, data, mode in files}
    for path in write:
        data, mode = wanted[path]
        write_file(path, data, mode)


def _before(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415 (tests import without it)

    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "path", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    make: list[Path] = []
    write: list[Path] = []
    diff: list[dict[str, str]] = []
    try:
        files = normalise(module.params["files"])
        make, write = plan(module.params["directories"], files)
        if module._diff:  # AnsibleModule's documented diff flag
            wanted = {path: data for path, data, _ in files}
            diff = [{"before_header": str(p), "after_header": str(p), "before": _before(p),
                     "after": wanted[p].decode(errors="replace")} for p in write]
        if not module.check_mode:
            apply(make, write, files)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    result: dict[str, Any] = {"changed": bool(make or write),
                              "changed_paths": [str(p) for p in [*make, *write]]}
    if diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
