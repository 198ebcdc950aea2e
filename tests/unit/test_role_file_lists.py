"""Each role's file list is decided once: vars/main.yml names the files it installs,
and both the tasks that write them (configure) and `sparkctl render` read that list.

Before, every role listed its files twice, in configure.yml and in render.yml, and
the two had drifted (render showed the API key's file 0600 where provision writes it
0640 for the server's group). These tests hold the shape: a template of the list is
named nowhere else in the role's tasks, and render and configure both use the list.
What each renders is checked by tests/contract/test_render.py and the molecule
scenarios.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "ansible_collections" / "sparkctl" / "spark" / "roles"

# role -> (its list in vars/main.yml, {task file: the variable of the list it reads})
LISTS: dict[str, tuple[str, dict[str, str]]] = {
    "base": ("_base_files", {"render.yml": "_base_files", "configure.yml": "_base_files"}),
    "nvidia_driver": (
        "_nvidia_driver_files",
        {"render.yml": "_nvidia_driver_files", "configure.yml": "_nvidia_driver_files"},
    ),
    "roce_fabric": (
        "_roce_fabric_files",
        {"render.yml": "_roce_fabric_files", "configure.yml": "_roce_fabric_files"},
    ),
    "nccl": ("_nccl_files", {"render.yml": "_nccl_files", "configure.yml": "_nccl_files"}),
    "monitoring": (
        "_monitoring_files",
        {"render.yml": "_monitoring_host_files", "configure.yml": "_monitoring_file_items"},
    ),
    "sglang": (
        "_sglang_files",
        {"render.yml": "_sglang_node_files", "configure.yml": "_sglang_secret_items"},
    ),
    "switch_mtu": (
        "_switch_mtu_linux_files",
        {"render.yml": "_switch_mtu_linux_files", "driver_linux.yml": "_switch_mtu_linux_files"},
    ),
}


def _derives(variables: dict[str, object], var: str, source: str) -> bool:
    """``var`` is ``source`` or is computed from it through the role's own vars."""
    seen: set[str] = set()
    todo = [var]
    while todo:
        name = todo.pop()
        if name == source:
            return True
        if name in seen or name not in variables:
            continue
        seen.add(name)
        text = str(variables[name])
        todo += [v for v in variables if v.startswith("_") and v in text]
    return False


def _vars(role: str) -> dict[str, object]:
    data = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_every_role_that_render_shows_has_a_list() -> None:
    assert sorted(p.parent.parent.name for p in ROLES.glob("*/tasks/render.yml")) == sorted(LISTS)


@pytest.mark.parametrize("role", sorted(LISTS))
def test_the_list_names_each_file_once_with_its_path_mode_and_source(role: str) -> None:
    name = LISTS[role][0]
    files = _vars(role)[name]
    assert isinstance(files, list) and files, name
    paths = [f["path"] for f in files]
    assert len(paths) == len(set(paths)), paths
    for f in files:
        assert set(f) >= {"path", "mode"}, f
        assert ("src" in f) != ("content" in f), f  # a template or a text, not both
        assert str(f["mode"]).startswith("0") or "{{" in str(f["mode"]), f
        if "src" in f:
            assert (ROLES / role / "templates" / f["src"]).is_file(), f["src"]


@pytest.mark.parametrize("role", sorted(LISTS))
def test_render_and_configure_read_the_list_and_name_none_of_its_templates(role: str) -> None:
    name, readers = LISTS[role]
    variables = _vars(role)
    files = variables[name]
    assert isinstance(files, list)
    templates = {f["src"] for f in files if "src" in f}
    for task_file, var in readers.items():
        lines = (ROLES / role / "tasks" / task_file).read_text().splitlines()
        text = "\n".join(ln for ln in lines if not ln.lstrip().startswith("#"))
        assert var in text, (task_file, var)
        assert _derives(variables, var, name), (var, name)
        named = sorted(t for t in templates if t in text)
        assert not named, f"{role}/tasks/{task_file} names {named}: use {name}"
