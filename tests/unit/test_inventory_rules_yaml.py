"""The inventory rules read the roles' YAML with libyaml's parser: the same data as PyYAML's own.

The rules (the CLI's check and every playbook's preflight filter) read every role's
argument specs, constraints and defaults on each check; libyaml's SafeLoader reads them
in a twelfth of the time of the pure-Python one. This holds the two to the same data for
every file the rules read, so a role file that the parsers read differently shows here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.rules import common as inventory_rules  # the YAML reader

ROLES = Path(__file__).resolve().parents[2] / "ansible_collections" / "sparkctl" / "spark" / "roles"
FILES = sorted(
    [
        *ROLES.glob("*/meta/argument_specs.yml"),
        *ROLES.glob("*/meta/constraints.yml"),
        *ROLES.glob("*/defaults/main.yml"),
    ]
)


def test_the_files_the_rules_read_are_there() -> None:
    assert len(FILES) >= 20, FILES
    assert {p.parent.name for p in FILES} == {"meta", "defaults"}


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROLES)) for p in FILES])
def test_libyaml_reads_each_role_file_as_pyyaml_does(path: Path) -> None:
    assert inventory_rules.load_yaml(path) == yaml.safe_load(path.read_text())


def test_libyaml_is_used_where_pyyaml_has_it() -> None:
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("this PyYAML is built without libyaml")
    assert inventory_rules._YAML_LOADER is yaml.CSafeLoader
