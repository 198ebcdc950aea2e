"""The roles' links into the sparkctl package, and the one loader of tool_output for filters.

Role code that must be the package's own code is a relative link into sparkctl/
(linted, type-checked and tested there, once): cluster_defaults' module_utils to
tool_output.py, the tool_output loader beside every filter that reads tool
output (sparkctl/tool_output_loader.py says why a filter loads it by path), and
the sink filters (sparkctl/sinks.py) in every role that writes a file from values.
Preflight's filter imports the rules package itself (sparkctl.rules, a package,
which a one-file link cannot carry). These tests hold every link to where it
should point and run the loader as Ansible runs a filter: standalone, and
through Ansible itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
LOADER = "sparkctl_tool_output_loader.py"

# Every link under roles/ and the file of the package it must reach.
LINKS = {
    "roles/cluster_defaults/module_utils/sparkctl_tool_output.py": "sparkctl/tool_output.py",
    f"roles/nccl/filter_plugins/{LOADER}": "sparkctl/tool_output_loader.py",
    f"roles/sglang/filter_plugins/{LOADER}": "sparkctl/tool_output_loader.py",
    # The sink filters (sparkctl/sinks.py) of every role that writes such a file.
    **{
        f"roles/{role}/filter_plugins/sparkctl_sinks.py": "sparkctl/sinks.py"
        for role in (
            "base",
            "monitoring",
            "nccl",
            "nvidia_driver",
            "roce_fabric",
            "sglang",
            "sglang_watchdog",
            "switch_mtu",
        )
    },
}


def test_every_link_under_roles_points_where_it_should() -> None:
    found = {p.relative_to(ROOT).as_posix(): p for p in ROLES.rglob("*") if p.is_symlink()}
    assert set(found) == set(LINKS), "a link was added or removed: list it in LINKS"
    for rel, path in found.items():
        target = path.readlink()
        assert not target.is_absolute(), f"{rel} -> {target}: make it relative"
        assert path.resolve() == (ROOT / LINKS[rel]).resolve(), f"{rel} -> {target}"
        assert path.is_file(), f"{rel} -> {target} is dangling"


def _filters() -> list[Path]:
    return sorted(p for p in ROLES.glob("*/filter_plugins/*.py") if not p.is_symlink())


def test_filters_reading_tool_output_use_the_linked_loader_and_no_copy_of_it() -> None:
    readers = [p for p in _filters() if "TOOL_OUTPUT" in p.read_text()]
    assert {p.parent.parent.name for p in readers} == {"nccl", "sglang"}
    for path in _filters():
        text = path.read_text()
        assert "spec_from_file_location" not in text, (
            f"{path.relative_to(ROOT)} loads a file itself: use {LOADER} beside it"
        )
    for path in readers:
        assert (path.parent / LOADER).is_symlink(), f"no {LOADER} link beside {path.name}"
        # Whitespace apart: ruff format breaks the call over lines.
        assert f'"{LOADER}")))["tool_output"](__file__)' in "".join(path.read_text().split()), (
            path.name
        )


# As Ansible loads a filter: by its path, under a name of its own, without the sparkctl
# package (blocked here, so an import of it would fail the run).
_STANDALONE = """
import importlib.util, sys
sys.modules["sparkctl"] = None
for name, path in enumerate(sys.argv[1:]):
    spec = importlib.util.spec_from_file_location(f"ansible_filter_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(module.TOOL_OUTPUT.__file__, id(module.TOOL_OUTPUT))
print(module.TOOL_OUTPUT.env_file("NCCL_IB_HCA==rocep1s0f1\\n"))
"""


def test_the_loader_gives_every_filter_the_one_parser_without_the_package() -> None:
    filters = [
        ROLES / "nccl" / "filter_plugins" / "nccl_env.py",
        ROLES / "sglang" / "filter_plugins" / "sglang_args.py",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _STANDALONE, *map(str, filters)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd="/",
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    *loaded, parsed = proc.stdout.splitlines()
    files = {line.split()[0] for line in loaded}
    assert files == {str(ROLES / "cluster_defaults" / "module_utils" / "sparkctl_tool_output.py")}
    assert len({line.split()[1] for line in loaded}) == 1  # one module for both filters
    assert parsed == "{'NCCL_IB_HCA': '=rocep1s0f1'}"


def test_the_loader_names_what_is_missing(tmp_path: Path) -> None:
    role = tmp_path / "roles" / "x" / "filter_plugins"
    role.mkdir(parents=True)
    (role / LOADER).symlink_to(ROOT / "sparkctl" / "tool_output_loader.py")
    code = (
        "import runpy, sys; sys.argv[1:] or sys.exit(2); "
        "runpy.run_path(sys.argv[1])['tool_output'](sys.argv[2])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(role / LOADER), str(role / "f.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1
    assert (
        f"ImportError: cannot load {tmp_path}/roles/cluster_defaults/module_utils/"
        "sparkctl_tool_output.py"
    ) in proc.stderr


def test_ansible_loads_the_filters_and_the_loader_without_a_warning(tmp_path: Path) -> None:
    ansible = Path(sys.executable).with_name("ansible")
    if not ansible.exists():
        pytest.skip("ansible not installed beside this Python")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
        "ANSIBLE_FILTER_PLUGINS": ":".join(
            str(ROLES / r / "filter_plugins") for r in ("nccl", "sglang")
        ),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_HOME": str(tmp_path),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
    }
    msg = (
        "{{ ('A=1\\nB=x=y\\n' | nccl_parse_env)"
        " | combine({'u': ('ActiveState=active\\n' | sglang_parse_show).ActiveState}) }}"
    )
    proc = subprocess.run(
        [str(ansible), "localhost", "-m", "ansible.builtin.debug", "-a", f"msg={msg}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for shown in ('"A": "1"', '"B": "x=y"', '"u": "active"'):
        assert shown in proc.stdout, proc.stdout
    assert "WARNING" not in proc.stderr and "Skipping plugin" not in proc.stderr, proc.stderr


def test_preflight_filter_is_the_rules_package_filter() -> None:
    """The play's filter is sparkctl.rules' own, not a copy that could drift."""
    from sparkctl.rules import filter as rules_filter  # noqa: PLC0415

    path = ROLES / "preflight" / "filter_plugins" / "sparkctl_inventory.py"
    namespace: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - our own file
    assert namespace["FilterModule"] is rules_filter.FilterModule
    assert "sparkctl_inventory_problems" in rules_filter.FilterModule().filters()
