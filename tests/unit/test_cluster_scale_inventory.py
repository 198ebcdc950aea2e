"""benchmarks/cluster_scale.py's N-node inventories pass the inventory rules, and its
4-node one is sim.ini: the per-node figures compare a cluster sparkctl accepts."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from sparkctl import inventory
from sparkctl.errors import SparkctlError
from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]


def _scale() -> ModuleType:
    return load_file("cluster_scale", REPO / "benchmarks" / "cluster_scale.py")


def _shape(inv: inventory.Inventory) -> tuple[object, ...]:
    return (
        inv.cluster,
        [(n.name, n.rank, n.mgmt_ip, dict(n.fabric_ips)) for n in inv.nodes],
        inv.switch,
        sorted((p.name, p.node, p.twin) for p in inv.ports),
    )


def test_the_four_node_inventory_is_sim_ini(tmp_path: Path) -> None:
    made = inventory.validate(_scale().write_inventory(tmp_path, 4))
    assert _shape(made) == _shape(inventory.validate(REPO / "inventory" / "sim.ini"))


def test_an_eight_node_inventory_passes_the_rules(tmp_path: Path) -> None:
    made = inventory.validate(_scale().write_inventory(tmp_path, 8))
    assert [n.name for n in made.nodes] == [f"spark{i}" for i in range(1, 9)]
    assert [n.rank for n in made.nodes] == list(range(8))
    assert len(made.ports) == 16
    assert {(p.node, p.twin) for p in made.ports} == {
        (f"spark{i}", t) for i in range(1, 9) for t in "ab"
    }
    # One fork per host: eight nodes and the switch.
    assert len(made.hostvars) == 9


def test_a_size_outside_the_address_plan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"outside 1\.\.40"):
        _scale().write_inventory(tmp_path, 41)
    with pytest.raises((SparkctlError, SystemExit)):
        inventory.validate(tmp_path / "sim41.ini")
