#!/usr/bin/python
"""Ansible module nvidia_kernel_modules: has each kernel that can run here the driver's nvidia.ko?

On DGX OS the GPU driver's kernel half is a prebuilt package per kernel
(``linux-modules-nvidia-580-open-<kernel>``). When apt moves the kernel but
holds that package back (it depends on a newer ``nvidia-kernel-common-580``),
the next boot has no ``nvidia.ko`` and no GPU. This module finds the running
kernel (``uname -r``) and the kernel the node boots next (GRUB's default entry,
else the ``/boot/vmlinuz`` symlink), asks ``modinfo -k <kernel> nvidia`` for
each, and compares the module's version with the installed driver's. It
returns the findings and, for each mismatch, a problem that says what to run;
the role's verify step fails on them. uname, modinfo and dpkg versions are read
by sparkctl's one parser of tool output (the collection's module_utils tool_output
here); GRUB's menu, a file only this module reads, is parsed here. Unit tests:
tests/unit/test_nvidia_driver.py (outputs under tests/fixtures/modinfo, uname
and grub), never shell in a task.
"""

from __future__ import annotations

import re
import shlex
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    ToolOutputError,
    debian_upstream_version,
    uname_release,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    modinfo as modinfo_fields,
)

DOCUMENTATION = r"""
---
module: nvidia_kernel_modules
short_description: The nvidia module of the running and the next boot's kernel, against the driver
description:
  - Runs C(uname -r) for the running kernel and reads GRUB's menu
    (I(grub_cfg), with I(grubenv) for C(saved_entry)/C(next_entry)) for the
    kernel the node boots next; without a GRUB menu, the first of
    I(vmlinuz_links) that is a symlink names it (linux-update-symlinks).
  - Runs C(modinfo -k <kernel> nvidia) for each and compares the module's
    C(version) with I(driver_version) (the upstream part of a Debian version).
  - Returns C(problems), one sentence per mismatch with the command that fixes
    it; fails only when it cannot look (no uname or modinfo).
  - Reads only; check mode is supported.
options:
  driver_version:
    description:
      - Installed version of I(driver_package), as dpkg has it
        (580.95.05-0ubuntu0.24.04.2); empty when not installed.
    type: str
    required: true
  driver_package:
    description: The package whose version the modules must match (named in messages).
    type: str
    required: true
  modules_package_prefix:
    description: The prebuilt module package's name without the kernel release.
    type: str
    required: true
  grub_cfg:
    description: GRUB's generated menu.
    type: path
    default: /boot/grub/grub.cfg
  grubenv:
    description: GRUB's environment block (saved_entry, next_entry).
    type: path
    default: /boot/grub/grubenv
  vmlinuz_links:
    description: Symlinks to the default kernel image, looked at when there is no GRUB menu.
    type: list
    elements: path
    default: [/boot/vmlinuz, /vmlinuz]
  node_name:
    description: Name of the node in messages; the host name when not given.
    type: str
author: sparkctl developers
"""

EXAMPLES = r"""
- name: The nvidia module of the running kernel and of the next boot's
  nvidia_kernel_modules:
    driver_version: "{{ ansible_facts['packages']['nvidia-kernel-common-580'][0].version }}"
    driver_package: nvidia-kernel-common-580
    modules_package_prefix: linux-modules-nvidia-580-open-
    node_name: "{{ inventory_hostname }}"
  register: kmods
"""

RETURN = r"""
driver_version:
  description: Upstream version of the installed driver (no epoch or revision); null if none.
  type: str
  returned: success
  sample: 580.142
running_kernel:
  description: Release of the running kernel (uname -r).
  type: str
  returned: success
  sample: 6.17.0-1014-nvidia
boot_kernel:
  description: Release of the kernel the node boots next; null when it cannot be told.
  type: str
  returned: success
  sample: 6.17.0-1014-nvidia
boot_source:
  description: How boot_kernel was found.
  type: str
  returned: success
  sample: "GRUB default entry 'DGX OS GNU/Linux' (/boot/grub/grub.cfg, set default=\"0\")"
modules:
  description: Kernel release -> its nvidia module (modinfo's filename, version, vermagic), or null.
  type: dict
  returned: success
problems:
  description: One sentence, with its fix, per kernel whose module is missing or another version.
  type: list
  elements: str
  returned: success
"""

RunCommand = Callable[[list[str]], tuple[int, str, str]]


class KernelModuleError(Exception):
    """What stopped the module from looking, worded for the person who runs the playbook."""


# ----------------------------------------------------------------- parsers
def parse_grubenv(text: str) -> dict[str, str]:
    """GRUB's environment block: 'name=value' lines, '#' lines and padding skipped."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep:
            env[name] = value
    return env


@dataclass
class GrubItem:
    """A menuentry (kernel: the release its `linux` line loads) or a submenu (items)."""

    kind: str
    title: str
    ident: str | None
    kernel: str | None = None
    items: list[GrubItem] = field(default_factory=list)


@dataclass
class GrubMenu:
    items: list[GrubItem]
    default: str
    honours_next_entry: bool


_SET_DEFAULT = re.compile(r'^set default=(?:"([^"]*)"|\'([^\']*)\'|(\S+))\s*\Z')


def _kernel_of(path: str) -> str | None:
    name = Path(path).name
    return name[len("vmlinuz-") :] if name.startswith("vmlinuz-") else None


def _open_item(word: str, line: str) -> GrubItem:
    """`menuentry 'Title' --class x $menuentry_id_option 'id' {` -> its item."""
    try:
        tokens = shlex.split(line[:-1])
    except ValueError:
        tokens = line.split()
    ident = None
    for i, token in enumerate(tokens[:-1]):
        if token in ("$menuentry_id_option", "--id"):
            ident = tokens[i + 1]
    return GrubItem(word, tokens[1] if len(tokens) > 1 else "", ident)


def parse_grub_cfg(text: str) -> GrubMenu:
    """grub-mkconfig's grub.cfg -> its menu tree and its `set default`.

    The file is GRUB script, but what grub-mkconfig writes has one statement
    per line: `menuentry 'Title' ... $menuentry_id_option 'id' {` or
    `submenu ... {` opens an item, a `linux <image> ...` line inside names its
    kernel, a lone `}` closes; `function name {` blocks (00_header) are
    skipped. 00_header writes `set default="${next_entry}"` when it honours
    grub-reboot, and `set default="<GRUB_DEFAULT>"` (or "${saved_entry}").
    """
    root = GrubItem("submenu", "", None)
    stack: list[GrubItem | None] = [root]
    defaults: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SET_DEFAULT.match(line)
        if match:
            defaults.append(next(g for g in match.groups() if g is not None))
            continue
        word = line.split(None, 1)[0]
        if word in ("menuentry", "submenu") and line.endswith("{"):
            item = _open_item(word, line)
            parent = stack[-1]
            if parent is not None and parent.kind == "submenu":
                parent.items.append(item)
            stack.append(item)
            continue
        if line.endswith("{"):
            stack.append(None)  # function ... { and other blocks: not menu items
            continue
        if line == "}":
            if len(stack) > 1:
                stack.pop()
            continue
        current = stack[-1]
        if (
            word == "linux"
            and current is not None
            and current.kind == "menuentry"
            and current.kernel is None
        ):
            parts = line.split()
            if len(parts) > 1:
                current.kernel = _kernel_of(parts[1])
    plain = [d for d in defaults if d != "${next_entry}"]
    return GrubMenu(
        items=root.items,
        default=plain[-1] if plain else "0",
        honours_next_entry="${next_entry}" in defaults,
    )


def _find(items: Sequence[GrubItem], component: str) -> GrubItem | None:
    if component.isdigit():
        index = int(component)
        return items[index] if index < len(items) else None
    for item in items:
        if item.ident == component:
            return item
    for item in items:
        if item.title == component:
            return item
    return None


def resolve_entry(menu: GrubMenu, selector: str) -> tuple[list[GrubItem], bool]:
    """The items GRUB walks for a default ('0', an id, a title, 'a>b').

    found=False: GRUB fell back to entry 0.

    GRUB's `default` (GRUB manual, "default"; grub-reboot(8): "menu items in
    submenus ... require specifying the submenu components and then the menu
    item component ... separated using the greater-than character"). An entry
    GRUB cannot find leaves it on the first entry.
    """
    path: list[GrubItem] = []
    items: Sequence[GrubItem] = menu.items
    for component in selector.split(">"):
        item = _find(items, component)
        if item is None:
            first = menu.items[:1]
            return first, False
        path.append(item)
        items = item.items
    # A submenu as the default opens it at its first entry.
    while path and path[-1].kind == "submenu" and path[-1].items:
        path.append(path[-1].items[0])
    return path, True


def menu_path_of(menu: GrubMenu, kernel: str) -> str | None:
    """'Submenu>Entry' of the first non-recovery entry booting `kernel` (for grub-set-default)."""

    def walk(items: Sequence[GrubItem], prefix: list[str]) -> str | None:
        for item in items:
            if item.kind == "menuentry" and item.kernel == kernel and "recovery" not in item.title:
                return ">".join([*prefix, item.title])
            found = walk(item.items, [*prefix, item.title]) if item.kind == "submenu" else None
            if found:
                return found
        return None

    return walk(menu.items, [])


def boot_kernel_from_grub(
    cfg_text: str, env_text: str, cfg_path: str = "/boot/grub/grub.cfg"
) -> tuple[str | None, str]:
    """(release GRUB boots next, how that was found) from grub.cfg and grubenv."""
    menu = parse_grub_cfg(cfg_text)
    env = parse_grubenv(env_text)
    if menu.honours_next_entry and env.get("next_entry"):
        selector = env["next_entry"]
        why = f"next_entry={selector} (grub-reboot, next boot only)"
    elif menu.default == "${saved_entry}":
        selector = env.get("saved_entry") or "0"
        why = f"saved_entry={env.get('saved_entry', '')} (GRUB_DEFAULT=saved)"
    else:
        selector, why = menu.default, f'set default="{menu.default}"'
    if not menu.items:
        return None, f"{cfg_path} has no menu entries"
    path, found = resolve_entry(menu, selector)
    if not found:
        why += ", not in the menu: GRUB falls back to the first entry"
    titles = ">".join(i.title for i in path)
    entry = path[-1] if path else None
    if entry is None or entry.kernel is None:
        return None, f"GRUB default entry '{titles}' boots no Linux image ({cfg_path}, {why})"
    return entry.kernel, f"GRUB default entry '{titles}' ({cfg_path}, {why})"


def boot_kernel_from_link(target: str, link: str) -> tuple[str | None, str]:
    """The release a /boot/vmlinuz symlink points at ('vmlinuz-6.17.0-1014-nvidia')."""
    return _kernel_of(target), f"{link} -> {target}"


# ----------------------------------------------------------------- judgement
@dataclass
class Findings:
    node: str
    driver_package: str
    driver_version: str | None
    prefix: str
    running: str
    boot: str | None
    boot_source: str
    modules: dict[str, dict[str, str] | None]
    modinfo_errors: dict[str, str]
    grub: GrubMenu | None = None

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.driver_version is None:
            return [
                f"{self.node}: {self.driver_package} is not installed, so no installed driver "
                "says which nvidia module a kernel needs; install the driver "
                f"({self.driver_package} and its nvidia-driver-*-open) and run provision again"
            ]
        if self.boot is None:
            out.append(
                f"{self.node}: cannot tell which kernel boots next ({self.boot_source}), so "
                "cannot promise it has the nvidia module; make GRUB's default entry a Linux "
                "kernel (GRUB_DEFAULT in /etc/default/grub, then `sudo update-grub`)"
            )
        kernels = [("running", self.running)]
        if self.boot is not None and self.boot != self.running:
            kernels.append(("next-boot", self.boot))
        for role, kernel in kernels:
            problem = self._problem(role, kernel)
            if problem:
                out.append(problem)
        return out

    def _problem(self, role: str, kernel: str) -> str | None:
        module = self.modules.get(kernel)
        version = (module or {}).get("version")
        if module is not None and version == self.driver_version:
            return None
        package = f"{self.prefix}{kernel}"
        what = (
            "the running kernel"
            if role == "running"
            else f"the kernel it boots next ({self.boot_source})"
        )
        if module is None:
            said = self.modinfo_errors.get(kernel, "not found")
            found = f"has no nvidia module (modinfo: {said})"
        else:
            found = (
                f"has nvidia module {version or 'of unknown version'} "
                f"({module.get('filename', '?')})"
            )
        fix = (
            f"install the module package built for driver {self.driver_version}: "
            f"`sudo apt-get install {package}` (`apt-cache policy {package}` shows the "
            f"candidates; each depends on {self.driver_package} of its own driver version). "
            "If apt wants a newer driver for it, kernel and driver must move together: "
            "unhold the packages of /etc/sparkctl/nvidia-hold.list (`apt-mark showhold`), "
            "upgrade kernel, modules and driver in one `apt-get install`, reboot, and run "
            "provision again to hold them"
        )
        if role == "next-boot":
            back = self.grub and menu_path_of(self.grub, self.running)
            keep = (
                f"`sudo grub-set-default '{back}'` with GRUB_DEFAULT=saved in "
                "/etc/default/grub and `sudo update-grub`"
                if back
                else "GRUB_DEFAULT in /etc/default/grub and `sudo update-grub`"
            )
            fix += f"; or, before any reboot, keep booting {self.running} ({keep})"
        return (
            f"{self.node}: {what}, {kernel}, {found}, but driver {self.driver_version} is "
            f"installed ({self.driver_package}); {fix}"
        )

    def result(self) -> dict[str, Any]:
        return {
            "driver_version": self.driver_version,
            "running_kernel": self.running,
            "boot_kernel": self.boot,
            "boot_source": self.boot_source,
            "modules": self.modules,
            "problems": self.problems(),
        }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KernelModuleError(f"cannot read {path}: {exc}") from exc


def find_boot_kernel(
    grub_cfg: str, grubenv: str, links: Sequence[str]
) -> tuple[str | None, str, GrubMenu | None]:
    cfg = _read(grub_cfg)
    if cfg is not None:
        kernel, why = boot_kernel_from_grub(cfg, _read(grubenv) or "", grub_cfg)
        return kernel, why, parse_grub_cfg(cfg)
    for link in links:
        if Path(link).is_symlink():
            kernel, why = boot_kernel_from_link(str(Path(link).readlink()), link)
            return kernel, why, None
    return None, f"no {grub_cfg} and no symlink {' or '.join(links)}", None


def kernel_modules(
    *,
    node: str,
    driver_package: str,
    driver_version: str | None,
    prefix: str,
    boot: tuple[str | None, str, GrubMenu | None],
    uname: str | None,
    modinfo: str | None,
    run: RunCommand,
) -> Findings:
    """Ask uname and modinfo, and put the findings together; KernelModuleError when it cannot."""
    if not uname or not modinfo:
        raise KernelModuleError(
            f"{node}: {'uname' if not uname else 'modinfo (kmod)'} not found, so the kernel's "
            "nvidia module cannot be checked"
        )
    rc, out, err = run([uname, "-r"])
    if rc != 0:
        said = err.strip() or out.strip()
        raise KernelModuleError(f"{node}: uname -r failed (exit {rc}): {said}")
    try:
        running = uname_release(out)
    except ToolOutputError as exc:
        raise KernelModuleError(f"{node}: {exc}") from exc
    boot_kernel, boot_source, menu = boot
    modules: dict[str, dict[str, str] | None] = {}
    errors: dict[str, str] = {}
    for kernel in dict.fromkeys(k for k in (running, boot_kernel) if k):
        rc, out, err = run([modinfo, "-k", kernel, "nvidia"])
        fields = modinfo_fields(out) if rc == 0 else {}
        if rc == 0 and fields.get("filename"):
            modules[kernel] = {
                k: fields[k] for k in ("filename", "version", "vermagic") if k in fields
            }
        else:
            modules[kernel] = None
            errors[kernel] = " ".join((err or out).split()) or f"exit {rc}"
    return Findings(
        node=node,
        driver_package=driver_package,
        driver_version=debian_upstream_version(driver_version),
        prefix=prefix,
        running=running,
        boot=boot_kernel,
        boot_source=boot_source,
        modules=modules,
        modinfo_errors=errors,
        grub=menu,
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "driver_version": {"type": "str", "required": True},
            "driver_package": {"type": "str", "required": True},
            "modules_package_prefix": {"type": "str", "required": True},
            "grub_cfg": {"type": "path", "default": "/boot/grub/grub.cfg"},
            "grubenv": {"type": "path", "default": "/boot/grub/grubenv"},
            "vmlinuz_links": {
                "type": "list",
                "elements": "path",
                "default": ["/boot/vmlinuz", "/vmlinuz"],
            },
            "node_name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    node = p["node_name"] or socket.gethostname()

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(
            argv, environ_update={"LC_ALL": "C"}, handle_exceptions=False
        )
        return rc, out, err

    try:
        findings = kernel_modules(
            node=node,
            driver_package=p["driver_package"],
            driver_version=p["driver_version"],
            prefix=p["modules_package_prefix"],
            boot=find_boot_kernel(p["grub_cfg"], p["grubenv"], p["vmlinuz_links"]),
            uname=module.get_bin_path("uname"),
            modinfo=module.get_bin_path("modinfo"),
            run=run,
        )
    except (KernelModuleError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **findings.result())


if __name__ == "__main__":
    main()
