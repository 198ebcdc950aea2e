"""Ansible action plugin: one file (or directory) of ``sparkctl render``, written by the controller.

Every sparkctl role depends on cluster_defaults, so this action is on the
plugin path wherever a role's tasks/render.yml runs. It exists for speed:
``ansible.builtin.template``, ``copy`` and ``file`` delegated to localhost run
their modules (stat, then copy or file) as subprocesses of the local
connection, about 3 s per host and file on a two-core controller, and those
tasks were nearly all of a render's minute. This action makes the same file in
the controller's own process:

- ``src``: the role's template, rendered by the calls ansible.builtin.template
  makes (the same template lookup, Jinja search path, template variables with
  ``ansible_managed``, and its default Jinja settings: trim_blocks on,
  lstrip_blocks off, "\\n" newlines), encoded as UTF-8;
- ``content``: the text as ansible.builtin.copy writes it (a list or dict as
  JSON, anything else as its string);
- ``state: directory``: the directory and its missing parents, each directory
  it creates given ``mode``, as ansible.builtin.file does.

A file is written only where it differs (content or mode), atomically: a
temporary file in the same directory, its mode set, then renamed; its missing
parent directories are created with mode 0755, whatever the umask. Whatever
host the task is for, everything is written on the controller, and only inside
``sparkctl_render_dir``: a ``dest`` elsewhere (also through a symlink) fails
the task. The writing is plain functions the unit tests import.
"""

from __future__ import annotations

import datetime
import json
import os
import pwd
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template
from jinja2.defaults import (
    BLOCK_END_STRING,
    BLOCK_START_STRING,
    COMMENT_END_STRING,
    COMMENT_START_STRING,
    VARIABLE_END_STRING,
    VARIABLE_START_STRING,
)

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "dest": {"type": "str", "required": True},
    "mode": {"type": "raw", "required": True},
    "src": {"type": "str"},
    "content": {"type": "raw"},
    "state": {"type": "str", "default": "file", "choices": ["file", "directory"]},
}

# The Jinja settings ansible.builtin.template renders with when a task sets none.
TEMPLATE_OVERRIDES: dict[str, Any] = {
    "block_start_string": BLOCK_START_STRING,
    "block_end_string": BLOCK_END_STRING,
    "variable_start_string": VARIABLE_START_STRING,
    "variable_end_string": VARIABLE_END_STRING,
    "comment_start_string": COMMENT_START_STRING,
    "comment_end_string": COMMENT_END_STRING,
    "trim_blocks": True,
    "lstrip_blocks": False,
    "newline_sequence": "\n",
}

_OCTAL_MODE = re.compile(r"0?[0-7]{3}")
# Directories this action makes on the way to a file: the mode the roles' render
# tasks always gave the directories they made (a host's own directory modes are
# not shown by render).
PARENT_MODE = 0o755


class RenderError(Exception):
    """A dest or mode this action refuses; the task fails with the message."""


def parse_mode(mode: object) -> int:
    """The permission bits of an octal string such as ``"0644"``.

    A YAML number is refused rather than guessed: unquoted, 0644 is the integer
    644 to a YAML 1.2 reader and 420 to a YAML 1.1 one.
    """
    if not isinstance(mode, str) or not _OCTAL_MODE.fullmatch(mode):
        raise RenderError(f"mode must be an octal string such as '0644', not {mode!r}")
    return int(mode, 8)


def inside(root: str, dest: str) -> Path:
    """``dest``, after checking that it lies strictly inside ``root`` once symlinks
    are resolved (a link in the tree must not lead the write out of it)."""
    if not root:
        raise RenderError("sparkctl_render_dir is not set: this action writes only under it")
    path = Path(dest)
    if not path.is_absolute():
        raise RenderError(f"dest must be an absolute path under {root}, not {dest!r}")
    real_root, real_dest = Path(root).resolve(), path.resolve()
    if real_dest == real_root or not real_dest.is_relative_to(real_root):
        raise RenderError(f"{dest} is outside sparkctl_render_dir ({root}): refused")
    return Path(os.path.normpath(path))


def _make_missing(path: Path, mode: int, *, check: bool) -> bool:
    """Create ``path`` and its missing parents, each given ``mode`` (not the umask's);
    False if ``path`` was already a directory."""
    missing: list[Path] = []
    head = path
    while not head.is_dir():
        if head.is_symlink() or head.exists():
            raise RenderError(f"{head} exists and is not a directory")
        missing.append(head)
        head = head.parent
    if check:
        return bool(missing)
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:  # made meanwhile by another host's fork: fine if a directory
            if not directory.is_dir():
                raise
        directory.chmod(mode)
    return bool(missing)


def make_directory(path: Path, mode: int, *, check: bool = False) -> bool:
    """``mkdir -p`` with ``mode`` on each directory it creates and on ``path`` itself,
    as ansible.builtin.file ``state: directory`` does; True if anything changed."""
    if _make_missing(path, mode, check=check):
        return True
    if stat.S_IMODE(path.stat().st_mode) == mode:
        return False
    if not check:
        path.chmod(mode)
    return True


def write_file(path: Path, data: bytes, mode: int, *, check: bool = False) -> bool:
    """``data`` at ``path`` with exactly ``mode``, replaced atomically where it differs;
    True if anything changed. Missing parents are made with PARENT_MODE."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise RenderError(f"{path} exists and is not a regular file")
    if path.exists():
        same_data = path.read_bytes() == data
        same_mode = stat.S_IMODE(path.stat().st_mode) == mode
        if same_data and same_mode:
            return False
        if same_data:  # only the mode differs
            if not check:
                path.chmod(mode)
            return True
    if check:
        return True
    _make_missing(path.parent, PARENT_MODE, check=False)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        tmp.chmod(mode)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def content_bytes(content: object) -> bytes:
    """``content`` as ansible.builtin.copy writes it."""
    text = json.dumps(content) if isinstance(content, dict | list) else content
    data: bytes = to_bytes(text)
    return data


def template_vars(path: str, fullpath: str, dest: str) -> dict[str, Any]:
    """The template_* variables ansible.builtin.template documents for a template's use
    (its module documentation, "template_host", "template_path", "template_fullpath",
    "template_destpath", "template_uid", "template_run_date"; and template_mtime), with
    the values ansible-core 2.19 gives them (lib/ansible/_internal/_templating/
    _template_vars.py, which is private: hence this copy, from public calls)."""
    st = os.stat(fullpath)  # noqa: PTH116 -- the stat ansible-core takes, as a string path
    uid: int | str
    try:
        uid = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        uid = st.st_uid
    return {
        "template_host": os.uname()[1],
        "template_path": path,
        "template_mtime": datetime.datetime.fromtimestamp(st.st_mtime),
        "template_uid": uid,
        "template_run_date": datetime.datetime.now(),
        "template_destpath": dest,
        "template_fullpath": fullpath,
    }


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars if task_vars is not None else {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(
            argument_spec=ARGUMENT_SPEC, mutually_exclusive=[("src", "content")]
        )
        check = bool(self._task.check_mode)
        try:
            mode = parse_mode(args["mode"])
            dest = inside(str(task_vars.get("sparkctl_render_dir") or ""), args["dest"])
            if args["state"] == "directory":
                if args["src"] is not None or args["content"] is not None:
                    raise RenderError("state=directory takes neither src nor content")
                changed = make_directory(dest, mode, check=check)
            elif args["src"] is None and args["content"] is None:
                raise RenderError("a file needs src (a template) or content")
            else:
                data = (
                    self._template(args["src"], args["dest"], task_vars)
                    if args["src"] is not None
                    else content_bytes(args["content"])
                )
                changed = write_file(dest, data, mode, check=check)
        except (RenderError, OSError) as exc:
            raise AnsibleActionFail(to_text(exc)) from exc
        result.update(changed=changed, dest=str(dest), mode=f"{mode:04o}", state=args["state"])
        return result

    def _template(self, src: str, dest: str, task_vars: dict[str, Any]) -> bytes:
        """The calls of ansible.builtin.template's ActionModule.run, up to the bytes it
        hands to copy (ansible-core 2.19, lib/ansible/plugins/action/template.py)."""
        try:
            source = self._find_needle("templates", src)
        except AnsibleError as exc:
            raise AnsibleActionFail(to_text(exc)) from exc
        template_data = trust_as_template(self._loader.get_text_file_contents(source))
        searchpath = [
            *task_vars.get("ansible_search_path", []),
            self._loader._basedir,
            os.path.dirname(source),  # noqa: PTH120 -- template.py's call, as strings
        ]
        # template's search path: the 'templates' subdir of each, then each.
        searchpath = [q for p in searchpath for q in (os.path.join(p, "templates"), p)]  # noqa: PTH118
        temp_vars = task_vars.copy()
        temp_vars.update(template_vars(src, source, dest))
        if "ansible_managed" not in temp_vars:
            # cluster_defaults sets it (its defaults/main.yml); ansible-core's own
            # fallback, the deprecated DEFAULT_MANAGED_STR, has no public reader.
            raise AnsibleActionFail("ansible_managed is not set (cluster_defaults sets it)")
        templar = self._templar.copy_with_new_env(
            searchpath=searchpath, available_variables=temp_vars
        )
        resultant = templar.template(
            template_data, escape_backslashes=False, overrides=TEMPLATE_OVERRIDES
        )
        if resultant is None:
            resultant = ""
        data: bytes = to_bytes(resultant, encoding="utf-8", errors="surrogate_or_strict")
        return data
