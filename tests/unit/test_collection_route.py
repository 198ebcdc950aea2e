"""sparkctl reaches the collection's Python by one route, sparkctl.collection, which
installs ansible-core's collection finder before anything of ``ansible_collections`` is
imported; nothing else in the package imports ``ansible_collections``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sparkctl"

# What `sparkctl serve verify` does in one process, run the way `python -m sparkctl`
# from the checkout runs it (the checkout on Python's path twice): load an inventory
# (Ansible's finder), then judge a firewall with the role's filter and read tool
# output with the collection's module_utils.
CODE = f"""
import sys
sys.path[:0] = [{str(REPO)!r}, {str(REPO)!r}]
from pathlib import Path
from sparkctl import inventory
inventory.validate(Path({str(REPO / "inventory" / "sim.ini")!r}))
from sparkctl.serve import firewall
from sparkctl import collection
fw = firewall.parser()
import ansible_collections.sparkctl.spark.plugins.module_utils.tool_output as direct
assert direct is collection.tool_output
print(fw.__name__, fw.__file__)
"""


def test_an_inventory_load_then_the_collections_plugins_import_in_one_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    name, path = proc.stdout.split()
    assert name == "ansible_collections.sparkctl.spark.plugins.filter.sglang_firewall"
    assert Path(path).is_relative_to(REPO / "ansible_collections" / "sparkctl" / "spark")


def test_only_sparkctl_collection_imports_ansible_collections() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "collection.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            offenders += [
                f"{path.relative_to(REPO)}:{node.lineno}"
                for n in names
                if n.split(".")[0] == "ansible_collections"
            ]
    assert not offenders, offenders
