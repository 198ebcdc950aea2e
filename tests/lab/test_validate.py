"""`sparkctl validate` end to end on the lab: it passes on a provisioned lab, and it
fails, naming the node, interface and switch port, for each fault below.

Faults are injected on the lab switch as a person would cause them (`sparkctl
lab port`): a port left at MTU 1500, a pulled cable, a port shaped to a
quarter. Each is undone after its test, and the lab is checked healthy again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SIM_INVENTORY, LabSession, assert_unchanged, sparkctl
from tests.labhost import STATE, ssh

# Bandwidth is measured (validate's NCCL gate): with nothing of the suite's beside it, no
# first pass and no molecule scenario (tests/conftest.py, _phase and wait_quiet).
pytestmark = [pytest.mark.lab, pytest.mark.quiet_host]

# swp3 carries spark2's twin a, swp4 its twin b, swp5 spark3's twin a
# (inventory/group_vars/sim/cluster.yml).
TWIN_A, TWIN_B = "enp1s0f1np1", "enP2p1s0f1np1"


def _validate(*args: str) -> tuple[int, dict[str, Any], str]:
    proc = sparkctl("validate", str(SIM_INVENTORY), "--json", *args, timeout=900)
    try:
        report = dict(json.loads(proc.stdout))
    except ValueError:
        report = {}
    return proc.returncode, report, proc.stderr


def _failed(report: dict[str, Any], check: str | None = None) -> list[dict[str, Any]]:
    return [
        c
        for c in report["checks"]
        if c["outcome"] in ("failed", "error") and (check is None or c["check"] == check)
    ]


def _wait_address(ip: str, netdev: str, address: str, timeout: float = 60) -> None:
    """After a port comes back, networkd re-adds the address; wait for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if address in ssh(ip, f"ip -4 -o addr show dev {netdev}", check=False).stdout:
            return
        time.sleep(1)
    raise AssertionError(f"{netdev} on {ip} did not get {address} back")


@pytest.fixture(scope="module")
def healthy(lab: LabSession, provisioned: dict[str, object]) -> dict[str, Any]:
    """The first validate of the provisioned lab: it must pass."""
    rc, report, err = _validate()
    assert rc == 0, f"validate failed on a provisioned lab ({rc}):\n{err[-4000:]}\n" + json.dumps(
        _failed(report) if report else {}, indent=1
    )
    return report


Snapshot = Callable[[], dict[str, object]]


@pytest.fixture
def port(lab: LabSession, snapshot: Snapshot) -> Iterator[Any]:
    """Change a switch port; every change is undone (and the address awaited) afterwards,
    and the cluster is then as it was before the fault."""
    changed: list[str] = []
    before = snapshot()

    def change(name: str, *args: str) -> None:
        sparkctl("lab", "port", name, *args, check=True)
        changed.append(name)

    yield change
    for name in changed:
        sparkctl(
            "lab",
            "port",
            name,
            "--mtu",
            "9216",
            "--up",
            "--rate",
            str(lab.inventory.cluster_var("lab_link_rate_mbit", 1000)),
            check=True,
        )
    node = {n.name: n for n in lab.inventory.nodes}
    for n in node.values():
        for twin, netdev in (("a", TWIN_A), ("b", TWIN_B)):
            _wait_address(n.mgmt_ip, netdev, n.fabric_ips[twin])
    assert_unchanged(before, snapshot(), "undoing the fault")


def test_validate_passes_on_a_provisioned_lab(healthy: dict[str, Any]) -> None:
    report = healthy
    assert report["verdict"] == "passed"
    hosts = {c["host"] for c in report["checks"]}
    assert hosts == {"spark1", "spark2", "spark3", "spark4", "cluster"}
    names = {c["check"] for c in report["checks"]}
    assert {
        "gpu",
        "cuda",
        "twin_up",
        "twin_address",
        "twin_mtu",
        "twin_speed",
        "roce_device",
        "nccl_env",
        "nccl_tests_binary",
        "mpirun",
        "cluster_ssh",
        "clock",
        "model_cache",
        "sglang_unit",
        "memory",
        "disk",
        "mesh",
        "unique_addresses",
        "neighbours",
    } <= names
    # Full mesh: 4 nodes x 3 peers x 2 twins, each passed.
    mesh = [c for c in report["checks"] if c["check"] == "mesh"]
    assert len(mesh) == 24 and all(c["outcome"] == "passed" for c in mesh)
    runs = {r["collective"]: r for r in report["nccl"] if r["scope"] == "all"}
    assert set(runs) == {"all_reduce", "all_gather"}
    rate = report["thresholds"]["line_rate_gbytes"]
    assert rate == pytest.approx(1000 / 8 / 1000)  # the lab's shaped 1000 Mbit/s
    for run in runs.values():
        assert run["outcome"] == "passed" and len(run["judged"]) == 3  # validate_judged_sizes
        rows = run["report"]["rows"]
        assert rows and rows[-1]["size"] == 16 << 20 and run["report"]["wrong"] == 0
        # Measured, not canned: below the shaped line rate, above the threshold.
        for j in run["judged"]:
            assert report["thresholds"]["min_busbw_gbytes"] <= j["busbw"] < rate * 1.05


def test_the_driver_checks_on_the_lab(healthy: dict[str, Any]) -> None:
    """The lab's nvidia-smi stand-in answers compute_cap as a GB10; nothing of the hold set is
    held outside it; the checks the sim profile has no hardware for are skipped with why."""
    by: dict[str, list[dict[str, Any]]] = {}
    for c in healthy["checks"]:
        by.setdefault(c["check"], []).append(c)
    for name in ("compute_cap", "holds"):
        assert len(by[name]) == 4 and all(c["outcome"] == "passed" for c in by[name]), by[name]
    assert all(c["message"] == "compute capability 12.1" for c in by["compute_cap"])
    # 4 nodes x 2 twins, each a veth: no PCIe link
    assert len(by["twin_pcie"]) == 8
    assert all(
        c["outcome"] == "skipped" and "is a virtual netdev" in c["message"] for c in by["twin_pcie"]
    )
    for name, why in (
        ("kernel_module", "cluster_hw.own_kernel is not true"),
        ("nvcc", "cluster_hw.cuda_toolkit is not true"),
    ):
        assert all(c["outcome"] == "skipped" and why in c["message"] for c in by[name]), name


def test_report_files_and_last_good(healthy: dict[str, Any]) -> None:
    run_dir = STATE / "results" / "sim" / healthy["run_id"]
    assert json.loads((run_dir / "report.json").read_text())["run_id"] == healthy["run_id"]
    html = (run_dir / "report.html").read_text()
    assert html.count("<svg") >= 2 and "<script" not in html
    assert (STATE / "results" / "sim" / "last-good").resolve() == run_dir.resolve()
    assert (run_dir / "nccl-all_reduce.log").read_text().count("# Avg bus bandwidth") == 1


@pytest.mark.fault
def test_switch_port_at_mtu_1500_fails_and_names_the_node(
    healthy: dict[str, Any], port: Any, snapshot: Snapshot
) -> None:
    port("swp5", "--mtu", "1500")  # spark3's twin a
    faulted = snapshot()
    rc, report, err = _validate("--no-nccl")
    assert_unchanged(faulted, snapshot(), "validate")
    assert rc == 1, err[-2000:]
    assert report["verdict"] == "failed"
    mesh = _failed(report, "mesh")
    assert mesh and all("spark3" in (c["host"], c["subject"].split()[-1]) for c in mesh)
    assert all(c["subject"].startswith(TWIN_A) for c in mesh)
    assert any("smaller MTU" in c["message"] for c in mesh)
    found = [f for f in report["localisation"] if f["host"] == "spark3"]
    assert found and TWIN_A in found[0]["subject"] and "swp5" in found[0]["subject"]
    assert "9000" in found[0]["message"]
    assert "spark3" in err and "swp5" in err  # the terminal line points at the port


@pytest.mark.fault
def test_fabric_link_down_fails_naming_node_and_interface(
    healthy: dict[str, Any], port: Any, snapshot: Snapshot
) -> None:
    port("swp4", "--down")  # spark2's twin b: the cable pulled
    faulted = snapshot()
    rc, report, err = _validate("--no-nccl")
    assert_unchanged(faulted, snapshot(), "validate")
    assert rc == 1, err[-2000:]
    down = _failed(report, "twin_up")
    assert [(c["host"], c["subject"]) for c in down] == [("spark2", TWIN_B)]
    assert "carrier 0" in down[0]["message"]
    found = [f for f in report["localisation"] if f["host"] == "spark2"]
    assert found and TWIN_B in found[0]["subject"] and "swp4" in found[0]["subject"]
    assert "spark2" in err and TWIN_B in err


@pytest.mark.fault
def test_a_fabric_address_changed_behind_sparkctls_back_is_named(
    healthy: dict[str, Any], lab: LabSession, snapshot: Snapshot
) -> None:
    node = lab.inventory.node("spark4")
    good, wrong = node.fabric_ips["a"], "192.168.100.44"
    before = snapshot()
    prefix = next(
        a.split("/")[1]
        for a in before["spark4"]["links"][TWIN_A]["inet"]  # type: ignore[index]
        if a.startswith(good + "/")
    )
    ssh(
        node.mgmt_ip,
        f"ip addr del {good}/{prefix} dev {TWIN_A} && ip addr add {wrong}/{prefix} dev {TWIN_A}",
    )
    try:
        faulted = snapshot()
        rc, report, err = _validate("--no-nccl")
        assert_unchanged(faulted, snapshot(), "validate")
    finally:
        ssh(
            node.mgmt_ip,
            f"ip addr del {wrong}/{prefix} dev {TWIN_A}; "
            f"ip addr replace {good}/{prefix} dev {TWIN_A}",
            check=False,
        )
    assert_unchanged(before, snapshot(), "undoing the fault")
    assert rc == 1, err[-2000:]
    wrong_addr = _failed(report, "twin_address")
    assert [(c["host"], c["subject"]) for c in wrong_addr] == [("spark4", TWIN_A)]
    assert good in wrong_addr[0]["message"] and wrong in wrong_addr[0]["message"]
    # the peers cannot reach spark4's twin a: the mesh is localised to spark4 alone
    assert {f["host"] for f in report["localisation"]} == {"spark4"}
    assert "spark4" in err and TWIN_A in err


@pytest.mark.fault
def test_port_shaped_to_a_quarter_fails_the_gate_and_pairs_name_the_node(
    healthy: dict[str, Any], lab: LabSession, port: Any, snapshot: Snapshot
) -> None:
    rate = int(lab.inventory.cluster_var("lab_link_rate_mbit", 1000))
    port("swp3", "--rate", str(rate // 4))  # spark2's twin a, which carries the traffic
    faulted = snapshot()
    rc, report, err = _validate("-c", "all_reduce", "--baseline", "last-good")
    assert_unchanged(faulted, snapshot(), "validate")
    assert rc == 1, err[-2000:]
    assert not _failed(report)  # every node check still passes: only bandwidth is wrong
    gate = [r for r in report["nccl"] if r["scope"] == "all"]
    assert [r["outcome"] for r in gate] == ["failed"]
    assert "of the line rate" in gate[0]["message"]
    pairs = [r for r in report["nccl"] if r["scope"] == "pair"]
    assert len(pairs) == 6  # every pair of four nodes, in three rounds
    found = [f for f in report["localisation"] if f["host"] != "cluster"]
    assert [f["host"] for f in found] == ["spark2"]
    assert "swp3" in found[0]["subject"]
    # Every pair's verdict is noted; spark2's three, at about a quarter, are slow.
    verdicts = [n for n in report["notes"] if n.startswith("pair ")]
    assert len(verdicts) == 6, report["notes"]
    assert all(": SLOW (" in n for n in verdicts if "spark2" in n.split(":")[0]), verdicts
    assert "spark2" in err
    base = report["baseline"]
    assert base["outcome"] == "failed" and base["run_id"] == healthy["run_id"]
    assert "all_reduce" in base["message"] and "MiB" in base["message"]
    assert (STATE / "results" / "sim" / "last-good").resolve().name == healthy["run_id"]


def test_after_the_faults_the_lab_validates_again(healthy: dict[str, Any]) -> None:
    rc, report, err = _validate("--no-nccl")
    assert rc == 0, err[-2000:] + json.dumps(_failed(report), indent=1)
    assert Path(STATE / "results" / "sim" / "last-good").resolve().name == report["run_id"]


def test_a_short_soak_runs_one_round_and_records_its_figures(healthy: dict[str, Any]) -> None:
    """validate --soak 1s: a soak shorter than a round runs exactly one; soak.json (also
    --json's output) and soak.html hold its busbw and each node's GPU readings; the
    stand-in reports temperature and power, not clocks; last-good stays where it was."""
    last_good = STATE / "results" / "sim" / "last-good"
    before = last_good.resolve()
    proc = sparkctl(
        "validate", str(SIM_INVENTORY), "--json", "--soak", "1s", "-c", "all_reduce", timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["kind"] == "soak" and data["requested_s"] == 1
    assert data["verdict"]["outcome"] == "stable", data["verdict"]
    (only,) = data["rounds"]
    assert only["index"] == 1 and only["failed_checks"] == [] and only["checks"] > 0
    (run,) = only["nccl"]
    assert run["collective"] == "all_reduce" and run["outcome"] == "passed" and run["wrong"] == 0
    busbw = {int(size): value for size, value in run["busbw"].items()}
    rate = data["thresholds"]["line_rate_gbytes"]
    assert max(busbw) == 16 << 20 and 0 < busbw[16 << 20] < rate * 1.05  # measured
    assert data["verdict"]["size"] == {"all_reduce": 16 << 20}
    readings = {r["node"]: r for r in only["nodes"]}
    assert set(readings) == {"spark1", "spark2", "spark3", "spark4"}
    for r in readings.values():
        assert r["temperature_c"] is not None and r["power_w"] is not None, r
        assert r["clock_sm_mhz"] is None
        assert r["note"] == "not reported: clocks.sm, clocks_event_reasons.active"
    run_dir = STATE / "results" / "sim" / data["run_id"]
    assert json.loads((run_dir / "soak.json").read_text()) == data
    page = (run_dir / "soak.html").read_text()
    for figure in ("busbw", "temperature", "power"):
        assert f'<figure id="soak-{figure}">' in page, figure
    assert "SM clock: not reported by nvidia-smi." in page and "<script" not in page
    round_report = json.loads((run_dir / "round-001" / "report.json").read_text())
    assert round_report["verdict"] == "passed"
    assert (run_dir / "round-001" / "nccl-all_reduce.log").is_file()
    assert "round 1/1" in proc.stderr
    assert last_good.resolve() == before
