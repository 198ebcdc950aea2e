"""Every plugin of the collection documents itself in YAML that parses, as ansible-doc,
ansible-lint and Galaxy read it (DOCUMENTATION, EXAMPLES, RETURN of modules; DOCUMENTATION
of the other plugins where present). A plain scalar holding ": " is a mapping key to YAML,
and one over two lines is an error: ansible-doc then fails on the module ("Unable to parse
documentation"), as it did on roce_gid_index and switch_port_mtu."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PLUGINS = REPO / "ansible_collections" / "sparkctl" / "spark" / "plugins"
MODULES = sorted((PLUGINS / "modules").glob("*.py"))
DOC_NAMES = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def _docs(path: Path) -> dict[str, str]:
    found = {}
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in DOC_NAMES
            and isinstance(node.value, ast.Constant)
        ):
            found[node.targets[0].id] = str(node.value.value)
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_each_modules_documentation_parses(path: Path) -> None:
    docs = _docs(path)
    # EXAMPLES and RETURN are not written for every module yet; what is there must parse.
    assert "DOCUMENTATION" in docs, path.name
    parsed = {name: yaml.safe_load(text) for name, text in docs.items()}
    assert parsed["DOCUMENTATION"]["module"] == path.stem
    assert isinstance(parsed["DOCUMENTATION"]["description"], list | str)


@pytest.mark.parametrize(
    "path",
    sorted(p for kind in ("filter", "action") for p in (PLUGINS / kind).glob("*.py")),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_other_plugins_documentation_parses_where_present(path: Path) -> None:
    for text in _docs(path).values():
        assert yaml.safe_load(text) is not None


def test_the_check_sees_a_colon_in_a_plain_scalar() -> None:
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(
            "description:\n  - Fails when a netdev has no GID (no address yet: the\n"
            "    fabric role must run first), or when the twins disagree.\n"
        )
