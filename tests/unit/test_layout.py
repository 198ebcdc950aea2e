"""TP layouts as a second inventory source (sparkctl/layout.py), read by ansible-core's
own InventoryManager as ``sparkctl`` reads every inventory: the names ``model plan``
gives, the groups they make, an overlay that outranks the operator's host_vars, the
rules judging the layout, and the refusals (exit 2) before any host is contacted."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from sparkctl import inventory, layout, model_plan
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.remote import plan_cache

pytestmark = [
    pytest.mark.unit,
    pytest.mark.filterwarnings("ignore:AnsibleCollectionFinder has already been configured"),
]

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "inventory" / "sim.ini"
TWO = ROOT / "inventory" / "sim-two-groups.ini"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _copy(tmp_path: Path) -> Path:
    shutil.copy(SIM, tmp_path / "sim.ini")
    shutil.copytree(SIM.parent / "group_vars", tmp_path / "group_vars")
    return tmp_path / "sim.ini"


def test_the_layouts_are_model_plans_names_for_the_clusters_sparks() -> None:
    assert [x.name for x in layout.allowed(4)] == [
        x.name
        for x in model_plan.make_plan(
            model_plan.ModelFiles("x", None, None, 1 << 30, 1),
            model_plan.spark_memory(),
            4,
        ).layouts
    ]
    assert [x.name for x in layout.parse("tp2x2, tp4,tp1x4", 4)] == ["tp2x2", "tp4", "tp1x4"]
    assert [x.name for x in layout.parse("tp2", 4)] == ["tp2x2"]  # two groups are implied
    assert [x.name for x in layout.allowed(2, gpus_per_node=2)] == ["tp4", "tp2x2"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("tp3", "tp3 does not split 4 Sparks (1 GPU each) into whole TP groups"),
        ("tp2x3", "tp2x3 does not split"),
        ("tp8", "tp8 does not split"),
        ("tp4,tp4", "tp4 is given twice"),
        ("tp2x2,tp2", "tp2x2 is given twice"),
        ("tp4;id", "'tp4;id' is not a layout name"),
        ("", "'' is not a layout name"),
    ],
)
def test_a_word_that_is_no_layout_of_the_cluster_is_refused(text: str, said: str) -> None:
    with pytest.raises(SparkctlError) as err:
        layout.parse(text, 4)
    assert err.value.code == ExitCode.BAD_INPUT
    assert said in err.value.message


def test_a_layout_is_a_second_source_whose_host_vars_give_each_spark_its_group(
    state: Path,
) -> None:
    inv = inventory.validate(SIM)
    (tp1x4,) = layout.parse("tp1x4", 4)
    before = SIM.read_bytes()
    target = layout.apply(inv, tp1x4)
    assert SIM.read_bytes() == before
    assert target.overlay == state / "layouts" / "sim" / "tp1x4" / "hosts.yml"
    assert target.sources == (SIM, target.overlay)
    assert layout.describe(target) == (
        "tp1x4-1: spark1; tp1x4-2: spark2; tp1x4-3: spark3; tp1x4-4: spark4"
    )
    for node in inv.nodes:
        hv = target.hostvars[node.name]
        assert hv["sglang_gateway_enabled"] is True  # one endpoint for several groups
        origin = target.origins[(node.name, "sglang_group")]
        assert origin.startswith(str(state / "layouts" / "sim" / "tp1x4" / "host_vars"))
    # nothing else moved: the layout's inventory is the inventory plus two variables
    for node in inv.nodes:
        mine = {k: v for k, v in target.hostvars[node.name].items() if k not in layout.SETS}
        theirs = {k: v for k, v in inv.hostvars[node.name].items() if k not in layout.SETS}
        assert mine == theirs
    assert target.groups == inv.groups and target.nodes == inv.nodes


def test_the_inventorys_own_layout_needs_no_second_source() -> None:
    two = inventory.validate(TWO)
    (tp2x2,) = layout.parse("tp2x2", 4)
    assert layout.apply(two, tp2x2) is two
    (tp4,) = layout.parse("tp4", 4)
    one = layout.apply(two, tp4)
    assert layout.describe(one) == "tp4: spark1, spark2, spark3, spark4"
    # one group keeps the inventory's gateway as it was
    assert one.hostvars["spark1"]["sglang_gateway_enabled"] is True


def test_the_layout_outranks_the_operators_host_vars(tmp_path: Path) -> None:
    """A group set in the operator's host_vars (above the inventory file's host vars in
    Ansible's precedence) is still the layout's: a later source's host_vars win."""
    path = _copy(tmp_path)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "spark4.yml").write_text("sglang_group: solo\n")
    inv = inventory.validate(path)
    assert layout.describe(inv) == "main: spark1, spark2, spark3; solo: spark4"
    (tp2x2,) = layout.parse("tp2x2", 4)
    target = layout.apply(inv, tp2x2)
    assert layout.describe(target) == "tp2x2-1: spark1, spark2; tp2x2-2: spark3, spark4"


def test_the_rules_judge_the_layout_before_any_host_is_contacted(tmp_path: Path) -> None:
    """An inventory that pins sglang_tp_size to 4 cannot be served as two groups of two:
    the layout's inventory is refused naming the file and the variable."""
    path = _copy(tmp_path)
    cluster_yml = tmp_path / "group_vars" / "sim" / "cluster.yml"
    cluster_yml.write_text(cluster_yml.read_text() + "\nsglang_tp_size: 4\n")
    inv = inventory.validate(path)
    (tp2x2,) = layout.parse("tp2x2", 4)
    with pytest.raises(SparkctlError) as err:
        layout.apply(inv, tp2x2)
    assert err.value.code == ExitCode.BAD_INPUT
    assert "sglang_tp_size" in err.value.message
    assert str(cluster_yml) in err.value.message


@pytest.mark.parametrize("name", layout.SETS)
def test_a_command_line_value_that_would_undo_the_layout_is_refused(name: str) -> None:
    inv = inventory.validate(SIM)
    (tp2x2,) = layout.parse("tp2x2", 4)
    with pytest.raises(SparkctlError) as err:
        layout.apply(inv, tp2x2, {name: "x"})
    assert err.value.code == ExitCode.BAD_INPUT
    assert f"-e {name}" in err.value.message


def test_the_plan_cache_keys_each_layout_apart() -> None:
    inv = inventory.validate(SIM)
    keys = {plan_cache._plan_key(inv.sources)}
    for x in layout.allowed(4):
        keys.add(plan_cache._plan_key(layout.apply(inv, x).sources))
    assert len(keys) == 3  # tp4 is sim.ini's own layout: its key is the inventory's


def test_an_overlay_left_from_a_larger_cluster_keeps_no_stale_host(tmp_path: Path) -> None:
    inv = inventory.validate(SIM)
    (tp2x2,) = layout.parse("tp2x2", 4)
    stale = layout.overlay_dir("sim", tp2x2) / "host_vars" / "spark9.yml"
    stale.parent.mkdir(parents=True)
    stale.write_text(textwrap.dedent("sglang_group: x\n"))
    layout.apply(inv, tp2x2)
    assert not stale.exists()
