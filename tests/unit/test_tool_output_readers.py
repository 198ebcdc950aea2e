"""Code that reads node tool output reads it through sparkctl.tool_output, on real outputs.

tests/unit/test_tool_output.py tests the parser itself; these feed its
readers elsewhere in sparkctl the real outputs under tests/fixtures/<tool>/
(each with its SOURCES.md), so a reader cannot drift back to a parse of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sparkctl.checks import test_node as checks
from sparkctl.plan import NodePlan, Plan
from sparkctl.serve.cluster import Cluster
from tests.unit import plans

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(tool: str, name: str) -> str:
    return (FIXTURES / tool / name).read_text()


# ---------------------------------------------------------------- serve: systemctl show
def _cluster(tmp_path: Path, answers: dict[str, tuple[int, str]]) -> Cluster:
    sglang = {"unit": "sparkctl-sglang.service", "port": 30000}
    return plans.cluster(
        plans.two_sparks(tmp_path), sglang, lambda host, cmd, timeout: answers[host], tmp_path
    )


def test_serve_reads_unit_states_with_the_one_systemctl_show_parser(tmp_path: Path) -> None:
    # A real `systemctl show` (RHEL 7.9, systemd 219): key=value lines, empty values too.
    real = fixture("systemctl", "rhel7-show-all-excerpt.txt")
    states = _cluster(
        tmp_path,
        {
            "spark1": (0, real),
            "spark2": (255, "ssh: connect to host 10.77.0.12 port 22: Connection refused\n"),
        },
    ).unit_states()
    assert (states["spark1"]["ActiveState"], states["spark1"]["SubState"]) == ("inactive", "dead")
    assert states["spark1"]["DropInPaths"] == ""
    assert states["spark2"] == {
        "ActiveState": "unknown",
        "SubState": "unreachable",
        "error": "ssh: connect to host 10.77.0.12 port 22: Connection refused",
    }


# ---------------------------------------------------------------- validate: ibv_devinfo
@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str = ""


@dataclass
class FakeHost:
    """testinfra's host as the node checks use it: run() answers one command."""

    answer: Result
    commands: list[str] = field(default_factory=list)

    def run(self, command: str) -> Result:
        self.commands.append(command)
        return self.answer


def _plan(rdma: bool, ibdev: str) -> tuple[Plan, NodePlan]:
    twin = {"twin": "a", "netdev": "enp1s0f1np1", "address": "192.168.100.11/24", "ibdev": ibdev}
    plan = plans.plan(["spark1"], rdma=rdma, edit=plans.sections(roce_fabric={"twins": [twin]}))
    return plan, plan.node("spark1")


def _roce_port(answer: Result, *, rdma: bool = True, ibdev: str = "rocep1s0f1") -> list[str]:
    plan, nplan = _plan(rdma, ibdev)
    seen: list[str] = []
    host = FakeHost(answer)
    checks.test_roce_port(host, plan, nplan, "a", seen.append)
    assert host.commands == ["timeout 30 ibv_devinfo"]
    return seen


SPARK_IBV_DEVINFO = fixture("ibv_devinfo", "gb10-port1-up.txt")  # a real Spark, f1 twins up


def test_roce_port_passes_on_a_real_sparks_active_port() -> None:
    assert _roce_port(Result(0, SPARK_IBV_DEVINFO)) == [
        "rocep1s0f1 port 1 PORT_ACTIVE, Ethernet, active MTU 4096"
    ]
    assert _roce_port(Result(0, SPARK_IBV_DEVINFO), ibdev="roceP2p1s0f1") == [
        "roceP2p1s0f1 port 1 PORT_ACTIVE, Ethernet, active MTU 4096"
    ]


def test_roce_port_fails_on_the_real_sparks_down_port() -> None:
    with pytest.raises(
        AssertionError,
        match=r"^rocep1s0f0 port 1 \(enp1s0f1np1\) is PORT_DOWN, "
        r"want PORT_ACTIVE",
    ):
        _roce_port(Result(0, SPARK_IBV_DEVINFO), ibdev="rocep1s0f0")


def test_roce_port_names_a_missing_device_or_tool() -> None:
    with pytest.raises(
        AssertionError,
        match=r"^ibv_devinfo lists no mlx5_0 \(have rocep1s0f0, "
        r"rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1\)",
    ):
        _roce_port(Result(0, SPARK_IBV_DEVINFO), ibdev="mlx5_0")
    gone = Result(
        127, "", "timeout: failed to run command 'ibv_devinfo': No such file or directory\n"
    )
    with pytest.raises(
        AssertionError,
        match=r"rc 127: .* \(ibv_devinfo is in Ubuntu's "
        r"ibverbs-utils, from rdma-core\)",
    ):
        _roce_port(gone)
    with pytest.raises(ValueError, match="no hca_id"):
        _roce_port(Result(0, "No IB devices found\n"))


def test_roce_port_is_skipped_where_the_profile_has_no_rdma() -> None:
    plan, nplan = _plan(False, "rocep1s0f1")
    host = FakeHost(Result(0, ""))
    with pytest.raises(
        pytest.skip.Exception,
        match=r"no RDMA devices on the sim profile \(cluster_hw.rdma is not true\)",
    ):
        checks.test_roce_port(host, plan, nplan, "a", print)
    assert host.commands == []  # nothing asked of a lab node
