#!/usr/bin/python
"""Ansible module: a set of directories, files and managed blocks, compared and written in one call.

Every sparkctl role depends on cluster_defaults, so this module is on the
module path wherever a role needs it. It exists for speed: a ``copy``,
``template``, ``file`` or ``blockinfile`` task costs one remote round trip per
file on every run, which on a four-node cluster was most of a no-change
provision. Here the whole set is compared at once and only what differs is
written (atomically: a running mpirun or server never sees a half-written
file). The comparison and the writing are plain functions that the unit tests
import.
"""

from __future__ import annotations

import errno
import grp
import hashlib
import os
import pwd
import shlex
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCUMENTATION = r"""
---
module: sparkctl_files
short_description: Directories, files and managed blocks, compared and written in one call
description:
  - Creates each of I(directories) (and parents) when missing, and corrects the
    mode and owner of those given as a dict.
  - Writes each of I(files) whose content, mode or owner differs, atomically
    (temporary file in the same directory, then rename).
  - Keeps one marked block in each of I(blocks) as given, leaving the rest of
    the file alone (what C(ansible.builtin.blockinfile) does, for many files
    in one call).
  - Returns the SHA-256 of every file it manages and of the paths in I(digests),
    so a play can compare files without another round trip.
  - Supports check mode and diff mode.
options:
  directories:
    description: >-
      Absolute paths, or dicts with C(path) and optional C(mode) (octal string,
      default 0755 for new directories), C(owner) and C(group).
    type: list
    elements: raw
    default: []
  files:
    description: >-
      Dicts with C(path), C(content) (text), and optional C(mode) (octal string,
      default 0644), C(owner), C(group) (names; default the connecting user's),
      C(validate) (a command with C(%s) for the new file, run before it replaces
      the old one) and C(unsafe_writes) (write in place when the file cannot be
      replaced by rename, as for a bind-mounted /etc/hosts).
    type: list
    elements: dict
    default: []
  blocks:
    description: >-
      Dicts with C(path), C(block) (text), C(marker) (a line with C({mark}),
      replaced by BEGIN and END), and optional C(create) (default true),
      C(mode) (default the file's, 0644 for a new file), C(owner), C(group),
      C(unsafe_writes).
    type: list
    elements: dict
    default: []
  digests:
    description: More paths whose SHA-256 is returned (null when missing); never changed.
    type: list
    elements: path
    default: []
author: sparkctl developers
"""

RETURN = r"""
changed_paths:
  description: Directories made or corrected and files written (or that would be, in check mode).
  type: list
  returned: always
sha256:
  description: >-
    path -> SHA-256 after the call (null when missing), for every file, block
    file and digest.
  type: dict
  returned: always
"""

DEFAULT_MARKER = "# {mark} SPARKCTL MANAGED BLOCK"


@dataclass(frozen=True)
class Want:
    """One file as it should be."""

    path: Path
    data: bytes
    mode: int
    owner: str | None = None
    group: str | None = None
    validate: str | None = None
    unsafe_writes: bool = False


@dataclass(frozen=True)
class Dir:
    path: Path
    mode: int | None = None
    owner: str | None = None
    group: str | None = None


def _mode(path: Path, text: object, default: int) -> int:
    if text is None:
        return default
    try:
        mode = int(str(text), 8)
    except ValueError:
        raise ValueError(f"{path}: mode {text!r} is not octal") from None
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"{path}: mode {text!r} out of range")
    return mode


def _absolute(text: object, what: str) -> Path:
    path = Path(str(text or ""))
    if not path.is_absolute():
        raise ValueError(f"{what} path {str(path)!r} is not absolute")
    return path


def _validate_cmd(path: Path, text: object) -> str | None:
    if text is None:
        return None
    if "%s" not in str(text):
        raise ValueError(f"{path}: validate {text!r} has no %s for the file")
    return str(text)


def normalise(files: list[dict[str, Any]]) -> list[Want]:
    """The files as wanted; refuses relative paths, bad modes and non-text content."""
    out: list[Want] = []
    for entry in files:
        path = _absolute(entry.get("path"), "file")
        mode = _mode(path, entry.get("mode"), 0o644)
        content = entry.get("content")
        if not isinstance(content, str):
            raise ValueError(f"{path}: content must be text")
        _ids(entry.get("owner"), entry.get("group"))  # unknown names fail before any write
        out.append(
            Want(
                path,
                content.encode(),
                mode,
                entry.get("owner"),
                entry.get("group"),
                _validate_cmd(path, entry.get("validate")),
                bool(entry.get("unsafe_writes", False)),
            )
        )
    return out


def normalise_dirs(directories: list[Any]) -> list[Dir]:
    out: list[Dir] = []
    for entry in directories:
        if isinstance(entry, dict):
            path = _absolute(entry.get("path"), "directory")
            _ids(entry.get("owner"), entry.get("group"))
            out.append(
                Dir(
                    path,
                    _mode(path, entry.get("mode"), 0o755) if "mode" in entry else None,
                    entry.get("owner"),
                    entry.get("group"),
                )
            )
        else:
            out.append(Dir(_absolute(entry, "directory")))
    return out


def with_block(text: str, block: str, marker: str) -> str:
    """``text`` with the block between ``marker``'s BEGIN and END lines set to ``block``.

    A file without the markers gets the block at its end; everything outside
    the markers is kept byte for byte. An empty block keeps the markers (as
    blockinfile does not: here a block is always present when listed).
    """
    begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
    body = block if block.endswith("\n") or not block else block + "\n"
    managed = f"{begin}\n{body}{end}\n"
    lines = text.splitlines(keepends=True)
    stripped = [line.rstrip("\r\n") for line in lines]
    if begin in stripped and end in stripped[stripped.index(begin) :]:
        first = stripped.index(begin)
        last = stripped.index(end, first)
        return "".join(lines[:first]) + managed + "".join(lines[last + 1 :])
    if text and not text.endswith("\n"):
        text += "\n"
    return text + managed


def block_wants(blocks: list[dict[str, Any]]) -> list[Want]:
    """Each block as the whole file it makes (read now from the node)."""
    out: list[Want] = []
    for entry in blocks:
        path = _absolute(entry.get("path"), "block")
        block = entry.get("block")
        if not isinstance(block, str):
            raise ValueError(f"{path}: block must be text")
        _ids(entry.get("owner"), entry.get("group"))
        marker = str(entry.get("marker") or DEFAULT_MARKER)
        if "{mark}" not in marker:
            raise ValueError(f"{path}: marker {marker!r} has no {{mark}}")
        try:
            st = path.stat()
            text = path.read_bytes().decode("utf-8")
            current_mode = stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            if not entry.get("create", True):
                raise ValueError(f"{path}: missing, and create is false") from None
            text, current_mode = "", 0o644
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not UTF-8 text; cannot manage a block in it") from None
        out.append(
            Want(
                path,
                with_block(text, block, marker).encode(),
                _mode(path, entry.get("mode"), current_mode),
                entry.get("owner"),
                entry.get("group"),
                None,
                bool(entry.get("unsafe_writes", False)),
            )
        )
    return out


def _ids(owner: str | None, group: str | None) -> tuple[int, int]:
    """uid, gid for names (-1: leave as it is)."""
    try:
        uid = pwd.getpwnam(owner).pw_uid if owner else -1
    except KeyError:
        raise ValueError(f"no user {owner!r} on this node") from None
    try:
        gid = grp.getgrnam(group).gr_gid if group else -1
    except KeyError:
        raise ValueError(f"no group {group!r} on this node") from None
    return uid, gid


def _owned(st: os.stat_result, owner: str | None, group: str | None) -> bool:
    uid, gid = _ids(owner, group)
    return uid in (-1, st.st_uid) and gid in (-1, st.st_gid)


def file_differs(want: Want) -> bool:
    """True when the file is missing, not a regular file, or has other bytes, mode or owner."""
    try:
        st = want.path.lstat()
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != want.mode:
        return True
    if not _owned(st, want.owner, want.group):
        return True
    return st.st_size != len(want.data) or want.path.read_bytes() != want.data


def dir_differs(want: Dir) -> bool:
    try:
        st = want.path.stat()
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{want.path} exists and is not a directory")
    if want.mode is not None and stat.S_IMODE(st.st_mode) != want.mode:
        return True
    return not _owned(st, want.owner, want.group)


def _validate(want: Want, tmp: str) -> None:
    if want.validate is None:
        return
    argv = shlex.split(want.validate.replace("%s", shlex.quote(tmp)))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    except FileNotFoundError as exc:
        raise ValueError(f"{want.path}: validate {want.validate!r}: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise ValueError(
            f"{want.path}: validate {want.validate!r} failed (rc {proc.returncode}): "
            + " | ".join(detail[-5:])
        )


def write_file(want: Want) -> None:
    """Replace the file atomically with the wanted bytes, mode and owner (after validate)."""
    fd, tmp = tempfile.mkstemp(dir=want.path.parent, prefix=f".{want.path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(want.data)
        os.chown(tmp, *_ids(want.owner, want.group))
        Path(tmp).chmod(want.mode)
        _validate(want, tmp)
        try:
            Path(tmp).replace(want.path)
        except OSError as exc:
            if not (want.unsafe_writes and exc.errno in (errno.EBUSY, errno.EXDEV, errno.EPERM)):
                raise
            # A bind-mounted file (a container's /etc/hosts) cannot be renamed over.
            with want.path.open("r+b") as handle:
                handle.write(want.data)
                handle.truncate()
            os.chown(want.path, *_ids(want.owner, want.group))
            want.path.chmod(want.mode)
    finally:
        Path(tmp).unlink(missing_ok=True)


def plan(directories: list[Dir], files: list[Want]) -> tuple[list[Dir], list[Want]]:
    """(directories to make or correct, files to write)."""
    return [d for d in directories if dir_differs(d)], [f for f in files if file_differs(f)]


def apply(make: list[Dir], write: list[Want]) -> None:
    for d in make:
        d.path.mkdir(mode=0o755 if d.mode is None else d.mode, parents=True, exist_ok=True)
        if d.mode is not None:
            d.path.chmod(d.mode)
        os.chown(d.path, *_ids(d.owner, d.group))
    for want in write:
        write_file(want)


def digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, IsADirectoryError):
        return None


def _before(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def run(params: dict[str, Any], check_mode: bool, want_diff: bool) -> dict[str, Any]:
    """The module's work, without AnsibleModule (the unit tests call this)."""
    directories = normalise_dirs(params.get("directories") or [])
    # Directories first: a block or file may live in one that is about to be made.
    make = [d for d in directories if dir_differs(d)]
    if not check_mode:
        apply(make, [])
    files = normalise(params.get("files") or []) + block_wants(params.get("blocks") or [])
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise ValueError(
            "a path is listed twice: "
            + ", ".join(sorted({str(p) for p in paths if paths.count(p) > 1}))
        )
    write = [f for f in files if file_differs(f)]
    result: dict[str, Any] = {
        "changed": bool(make or write),
        "changed_paths": [str(d.path) for d in make] + [str(f.path) for f in write],
    }
    if want_diff and write:
        result["diff"] = [
            {
                "before_header": str(f.path),
                "after_header": str(f.path),
                "before": _before(f.path),
                "after": f.data.decode(errors="replace"),
            }
            for f in write
        ]
    if not check_mode:
        apply([], write)
    wanted = {str(f.path): f.data for f in files}
    result["sha256"] = {
        **{
            p: (hashlib.sha256(data).hexdigest() if check_mode else digest(Path(p)))
            for p, data in wanted.items()
        },
        **{str(p): digest(Path(p)) for p in params.get("digests") or [] if str(p) not in wanted},
    }
    return result


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415 (tests import without it)

    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "raw", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
            "blocks": {"type": "list", "elements": "dict", "default": []},
            "digests": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode, module._diff)  # documented diff flag
    except (OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
