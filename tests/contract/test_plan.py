"""sparkctl.plan: the real plan, as the play writes it, read into the typed plan.

The plans come from playbooks/validate_plan.yml run by sparkctl itself (load_plan,
as `sparkctl validate` and `serve` run it) for the shipped inventories: the lab's,
the Spark example's and the lab's two TP groups. A role that adds, drops or
retypes a field of its tasks/plan.yml fails here, by the field's name.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkctl import inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.plan import NodePlan, Plan, SglangPlan, Twin
from sparkctl.remote import load_plan
from sparkctl.rules import DEFAULT_SGLANG_GROUP
from tests.unit import plans

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = ("sim.ini", "lab.ini", "sim-two-groups.ini")


@pytest.fixture(scope="module")
def real_plans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """Each shipped inventory's plan JSON, computed once by the real play."""
    root = tmp_path_factory.mktemp("plans")
    out: dict[str, dict[str, Any]] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARKCTL_STATE_DIR", str(root / "state"))
        for name in INVENTORIES:
            run_dir = root / name
            run_dir.mkdir()
            load_plan(inventory.validate(REPO / "inventory" / name), run_dir)
            out[name] = json.loads((run_dir / "plan.json").read_text())
        yield out


@pytest.mark.parametrize("name", INVENTORIES)
def test_the_real_plan_reads_into_the_typed_plan(
    real_plans: dict[str, dict[str, Any]], name: str
) -> None:
    plan = Plan.from_dict(real_plans[name])
    assert plan.schema == 1
    assert plan.nodes == ["spark1", "spark2", "spark3", "spark4"]
    assert [plan.node(n).node_rank for n in plan.nodes] == [0, 1, 2, 3]
    for node in plan.hosts.values():
        assert isinstance(node, NodePlan)
        assert [t.twin for t in node.roce_fabric.twins] == ["a", "b"]
        assert all(isinstance(t, Twin) for t in node.roce_fabric.twins)
        assert node.roce_fabric.twin("a").address == f"{node.fabric_a_ip}/24"
        assert node.roce_fabric.twin("b").address == f"{node.fabric_b_ip}/24"
        assert node.nccl.socket_ifname == node.roce_fabric.twin("a").netdev
        assert node.base.head == "spark1"
        assert node.sglang.group_members[node.sglang.group_rank] in plan.hosts
        assert node.validate == plan.settings  # cluster-wide
    # A plan read back is what sparkctl wrote: every field the role wrote is in it.
    head = real_plans[name]["hosts"]["spark1"]
    assert set(head) == set(NodePlan.__dataclass_fields__)
    assert set(head["sglang"]) == set(SglangPlan.__dataclass_fields__)


def test_each_inventorys_values_arrive_typed(real_plans: dict[str, dict[str, Any]]) -> None:
    sim = Plan.from_dict(real_plans["sim.ini"])
    lab = Plan.from_dict(real_plans["lab.ini"])
    assert (sim.hw_profile, lab.hw_profile) == ("sim", "dgx_spark")
    # the lab reads its shaped line rate from the nodes; a Spark's is 25 GB/s
    assert sim.settings.line_rate_gbytes == 0.125 and lab.settings.line_rate_gbytes == 25.0
    assert sim.settings.busbw_min_fraction == 0.4
    assert lab.settings.busbw_min_fraction == {
        "all_gather": 0.875,
        "all_reduce": None,
        "reduce_scatter": None,
    }
    assert lab.node("spark2").base.cluster_user == "admin"
    assert lab.node("spark2").nccl.rdma_expected and not sim.node("spark2").nccl.rdma_expected
    assert sim.node("spark1").sglang.port == 30000 and sim.node("spark1").sglang.tp_size == 4
    assert sim.node("spark1").nccl.env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"


def test_groups_come_from_the_role_with_the_one_default_name(
    real_plans: dict[str, dict[str, Any]],
) -> None:
    one = Plan.from_dict(real_plans["sim.ini"])
    assert {n.sglang.group for n in one.hosts.values()} == {DEFAULT_SGLANG_GROUP}
    two = Plan.from_dict(real_plans["sim-two-groups.ini"])
    groups = {n: (s.group, s.group_head, s.group_rank, s.group_members) for n, s in _sglang(two)}
    assert groups == {
        "spark1": ("a", "spark1", 0, ("spark1", "spark2")),
        "spark2": ("a", "spark1", 1, ("spark1", "spark2")),
        "spark3": ("b", "spark3", 0, ("spark3", "spark4")),
        "spark4": ("b", "spark3", 1, ("spark3", "spark4")),
    }


def _sglang(plan: Plan) -> list[tuple[str, SglangPlan]]:
    return [(n, node.sglang) for n, node in plan.hosts.items()]


def test_the_unit_tests_plan_has_the_real_plans_shape(
    real_plans: dict[str, dict[str, Any]],
) -> None:
    """tests/unit/plans.py builds what the sim inventory's play writes, key for key."""
    real, made = real_plans["sim.ini"], plans.plan_dict()

    def shape(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items() if k not in ("cluster_hw", "env")}
        if isinstance(value, list) and value and isinstance(value[0], dict):
            return [shape(value[0])]
        return type(value).__name__ if value is not None else None

    assert shape(made["hosts"]["spark1"]) == shape(real["hosts"]["spark1"])
    assert set(made) == set(real)


def test_a_plan_before_groups_is_one_default_group_of_every_node() -> None:
    data = plans.plan_dict(["spark1", "spark2"])
    for part in data["hosts"].values():
        for key in ("group", "group_head", "group_rank", "group_members"):
            del part["sglang"][key]
    plan = Plan.from_dict(data)
    assert [(s.group, s.group_head, s.group_rank, s.group_members) for _, s in _sglang(plan)] == [
        (DEFAULT_SGLANG_GROUP, "spark1", 0, ("spark1", "spark2")),
        (DEFAULT_SGLANG_GROUP, "spark1", 1, ("spark1", "spark2")),
    ]


def _bad(edit: Any) -> str:
    data = plans.plan_dict(["spark1", "spark2"])
    edit(data)
    with pytest.raises(SparkctlError) as err:
        Plan.from_dict(data)
    assert err.value.code == ExitCode.BAD_INPUT
    return err.value.message


def _set(path: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target = data
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value

    return edit


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("hosts/spark2/sglang/port", "x", "plan: spark2: sglang.port: expected int, got 'x'"),
        ("hosts/spark2/sglang/port", True, "plan: spark2: sglang.port: expected int, got True"),
        ("hosts/spark1/node_rank", "0", "plan: spark1: node_rank: expected int, got '0'"),
        ("hosts/spark1/base/is_head", "yes", "plan: spark1: base.is_head: expected bool"),
        ("hosts/spark2/nvidia_driver/min_cuda", 13.0, "plan: spark2: nvidia_driver.min_cuda:"),
        ("hosts/spark2/roce_fabric/twins", {}, "plan: spark2: roce_fabric.twins: expected a list"),
        ("hosts/spark2/nccl/env/NCCL_IB_HCA", ["x"], "plan: spark2: nccl.env.NCCL_IB_HCA:"),
        (
            "hosts/spark2/validate/line_rate_gbytes",
            "fast",
            "plan: spark2: validate.line_rate_gbytes: expected a number or null, got 'fast'",
        ),
        ("hosts/spark2/validate/perftest", 1, "plan: spark2: validate.perftest: expected str"),
        ("hosts/spark2/sglang", [], "plan: spark2: sglang: expected a mapping, got []"),
        ("hosts", [], "plan: hosts: expected a mapping, got []"),
        ("schema", "1", "plan: schema: expected int, got '1'"),
    ],
)
def test_a_bad_field_is_named_with_its_path(path: str, value: Any, message: str) -> None:
    assert _bad(_set(path, value)).startswith(message)


def test_a_bad_twin_is_named_by_its_index() -> None:
    def edit(data: dict[str, Any]) -> None:
        data["hosts"]["spark2"]["roce_fabric"]["twins"][1]["ibdev"] = 7

    assert _bad(edit) == "plan: spark2: roce_fabric.twins[1].ibdev: expected str, got 7"


def test_a_missing_or_unexpected_field_is_named() -> None:
    def drop(data: dict[str, Any]) -> None:
        del data["hosts"]["spark2"]["model_cache"]["relay"]

    assert _bad(drop) == "plan: spark2: model_cache.relay: missing"

    def add(data: dict[str, Any]) -> None:
        data["hosts"]["spark1"]["sglang"]["tp"] = 4

    assert _bad(add).startswith("plan: spark1: sglang.tp: unexpected field (the roles write unit,")
    assert _bad(lambda d: d.pop("hw_profile")) == "plan: hw_profile: missing"
    assert _bad(lambda d: d.__setitem__("hosts", {})).startswith("plan: hosts: expected at least")


def test_unset_and_numeric_line_rates_as_the_role_may_template_them() -> None:
    for raw, want in ((None, None), ("", None), ("None", None), ("25", 25.0), (25, 25.0)):
        assert plans.plan(line_rate=raw).settings.line_rate_gbytes == want


def test_reading_does_not_change_the_json() -> None:
    data = plans.plan_dict()
    before = copy.deepcopy(data)
    Plan.from_dict(data)
    assert data == before


def test_the_nvidia_driver_plan_carries_the_branch_hold_set_and_nvcc(
    real_plans: dict[str, dict[str, Any]],
) -> None:
    for name in INVENTORIES:
        driver = Plan.from_dict(real_plans[name]).node("spark1").nvidia_driver
        assert driver.hold == plans.NVIDIA_HOLD, name  # the role's set, as the fixtures know it
        assert (driver.branch, driver.driver_package) == ("580", "nvidia-kernel-common-580")
        assert driver.modules_prefix == "linux-modules-nvidia-580-open-"
        assert driver.kernel_flavour == "nvidia-hwe-24.04"
        assert (driver.nvcc, driver.min_nvcc, driver.cuda_release) == (
            "/usr/local/cuda/bin/nvcc",
            "13.0",
            "13.0",
        )
        assert driver.hold_list == "/etc/sparkctl/nvidia-hold.list"
        assert not [p for p in driver.hold if "container" in p or p == "cuda-*"]
