"""sparkctl.validate.run: cluster checks, mesh localisation, summary, baseline, line rate,
the plan cache key (sparkctl.remote.plan_cache); sparkctl.remote.sshconfig; Report.verdict."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, cast

import pytest

from sparkctl import inventory, paths
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.inventory import SwitchPort
from sparkctl.plan import Plan
from sparkctl.remote import plan_cache, sshconfig
from sparkctl.report.model import (
    Baseline,
    BaselineItem,
    Check,
    Finding,
    Judged,
    NcclRun,
    Outcome,
    Report,
    Thresholds,
)
from sparkctl.validate import run
from tests.unit import plans

NODES = ["spark1", "spark2", "spark3", "spark4"]
TWIN_NETDEV = {"a": "enp1s0f1np1", "b": "enP2p1s0f1np1"}
TWIN_IBDEV = {"a": "rocep1s0f1", "b": "roceP2p1s0f1"}
TWIN_SUBNET = {"a": "192.168.100", "b": "192.168.101"}


def fabric_ip(node: str, twin: str) -> str:
    return f"{TWIN_SUBNET[twin]}.1{node[-1]}"


def mac(node: str, twin: str) -> str:
    return f"4c:bb:47:2a:1{node[-1]}:{'0a' if twin == 'a' else '0b'}"


def make_plan(
    nodes: list[str] = NODES,
    *,
    line_rate: Any = None,
    perftest: Any = "auto",
    cluster_user: str = "root",
) -> dict[str, Any]:
    """A plan of the same shape as validate_plan.yml writes (the lab's values), read
    through Plan.from_dict so that it cannot drift from that shape."""
    data = plans.plan_dict(
        nodes,
        line_rate=line_rate,
        perftest=perftest,
        cluster_user=cluster_user,
        # these tests' gate has no sanity floor (Thresholds' default)
        edit=plans.sections(validate={"busbw_floor_ratio": 0.0}),
    )
    Plan.from_dict(data)
    return data


def typed_plan(nodes: list[str] = NODES, **kw: Any) -> Plan:
    """:func:`make_plan` as sparkctl reads it."""
    return Plan.from_dict(make_plan(nodes, **kw))


def node_facts(node: str, nodes: list[str] = NODES) -> dict[str, Any]:
    """What the node checks record on a healthy node: addresses, its MACs, its neighbours."""
    return {
        "addresses": {
            "lo": ["127.0.0.1/8"],
            "enP7s7": [f"10.0.0.2{node[-1]}/24"],
            "enp1s0f1np1": [f"{fabric_ip(node, 'a')}/24"],
            "enP2p1s0f1np1": [f"{fabric_ip(node, 'b')}/24"],
        },
        "mac": {"a": mac(node, "a"), "b": mac(node, "b")},
        "neigh": {
            fabric_ip(peer, t): mac(peer, t) for peer in nodes if peer != node for t in ("a", "b")
        },
        "mem_available": 23969596 * 1024,
    }


def healthy_facts() -> dict[str, dict[str, Any]]:
    return {n: node_facts(n) for n in NODES}


def by_check(checks: list[Check], name: str) -> list[Check]:
    return [c for c in checks if c.check == name]


# ---------------------------------------------------------------- cluster checks


def test_cluster_checks_of_a_healthy_cluster() -> None:
    checks = run.cluster_checks(typed_plan(), healthy_facts(), set())
    assert [(c.check, c.host, c.outcome) for c in checks] == [
        ("unique_addresses", "cluster", "passed"),
        ("neighbours", "cluster", "passed"),
    ]
    assert checks[0].message == "12 addresses on 4 nodes, none twice"
    assert checks[1].message == "every fabric address answered from its owner's interface"


def test_loopback_and_link_local_on_every_node_are_not_duplicates() -> None:
    facts = healthy_facts()
    for seen in facts.values():
        seen["addresses"]["lo"] = ["127.0.0.1/8", "127.0.1.1/8"]
        seen["addresses"]["enp1s0f1np1"].append("169.254.3.1/16")
    checks = run.cluster_checks(typed_plan(), facts, set())
    assert by_check(checks, "unique_addresses")[0].outcome == "passed"


def test_one_node_with_an_address_twice_is_not_a_duplicate_across_nodes() -> None:
    facts = healthy_facts()
    facts["spark1"]["addresses"]["enP2p1s0f1np1"].append("192.168.100.11/24")
    assert (
        by_check(run.cluster_checks(typed_plan(), facts, set()), "unique_addresses")[0].outcome
        == "passed"
    )


def test_an_address_on_two_nodes_fails_naming_both() -> None:
    facts = healthy_facts()
    facts["spark3"]["addresses"]["enp1s0f1np1"] = ["192.168.100.12/24"]  # spark2's
    checks = run.cluster_checks(typed_plan(), facts, set())
    dup = by_check(checks, "unique_addresses")
    assert dup == [
        Check(
            "unique_addresses",
            "cluster",
            "192.168.100.12",
            "failed",
            "192.168.100.12 is configured on spark2 enp1s0f1np1 and spark3 enp1s0f1np1",
        )
    ]


def test_a_neighbour_mac_that_is_not_the_owners_twin_fails() -> None:
    facts = healthy_facts()
    # spark4's twin a answers for spark3's twin-a address.
    facts["spark1"]["neigh"]["192.168.100.13"] = mac("spark4", "a")
    checks = run.cluster_checks(typed_plan(), facts, set())
    neighbours = by_check(checks, "neighbours")
    assert neighbours == [
        Check(
            "neighbours",
            "cluster",
            None,
            "failed",
            "spark1 reached 192.168.100.13 at 4c:bb:47:2a:14:0a, which is not spark3's twin a "
            "(4c:bb:47:2a:13:0a): another host answers for spark3's address",
        )
    ]


def test_neighbour_macs_compare_without_case_and_unresolved_ones_are_skipped() -> None:
    facts = healthy_facts()
    facts["spark1"]["neigh"]["192.168.100.13"] = mac("spark3", "a").upper()
    facts["spark2"]["neigh"]["192.168.101.14"] = None  # FAILED entry: no MAC
    facts["spark2"]["neigh"]["10.0.0.1"] = "02:00:00:00:00:01"  # not a fabric address
    checks = run.cluster_checks(typed_plan(), facts, set())
    assert by_check(checks, "neighbours")[0].outcome == "passed"


def test_down_nodes_fail_all_nodes() -> None:
    facts = {n: node_facts(n) for n in ("spark1", "spark2")}
    checks = run.cluster_checks(typed_plan(), facts, {"spark4", "spark3"})
    assert by_check(checks, "all_nodes") == [
        Check("all_nodes", "cluster", None, "failed", "no answer from spark3, spark4")
    ]
    assert by_check(checks, "unique_addresses")[0].outcome == "passed"


def test_no_node_answered() -> None:
    checks = run.cluster_checks(typed_plan(), {}, set(NODES))
    assert [(c.check, c.outcome) for c in checks] == [
        ("unique_addresses", "skipped"),
        ("all_nodes", "failed"),
    ]
    assert checks[0].message == "no node reported its addresses"


# ---------------------------------------------------------------- mesh localisation

PORTS = [SwitchPort(f"swp{n[-1]}", n, "a") for n in NODES] + [
    SwitchPort(f"swp{int(n[-1]) + 4}", n, "b") for n in NODES
]


def inv_with(ports: list[SwitchPort]) -> inventory.Inventory:
    return cast(inventory.Inventory, SimpleNamespace(ports=tuple(ports)))


def mesh_checks(bad: str | None = None, twin: str = "a", kind: str = "mtu") -> list[Check]:
    """Every node's mesh pings on both twins, as the node checks report them."""
    checks = []
    for node in NODES:
        for t in ("a", "b"):
            netdev = TWIN_NETDEV[t]
            for peer in NODES:
                if peer == node:
                    continue
                address = fabric_ip(peer, t)
                subject = f"{netdev} -> {peer}"
                if bad in (node, peer) and t == twin:
                    message = (
                        f"{peer} ({address}) answers small pings on {netdev} but 0/3 "
                        "9000-byte DF pings: a hop on this path (switch port?) has a "
                        "smaller MTU"
                        if kind == "mtu"
                        else f"{peer} ({address}) does not answer on {netdev}"
                    )
                    checks.append(Check("mesh", node, subject, "failed", message))
                else:
                    checks.append(
                        Check(
                            "mesh",
                            node,
                            subject,
                            "passed",
                            f"9000-byte frames to {peer} ({address}) on {netdev}",
                        )
                    )
    return checks


def test_mesh_of_a_healthy_fabric_finds_nothing() -> None:
    checks = mesh_checks()
    assert len(checks) == 24 and all(c.ok for c in checks)
    assert run.mesh_findings(inv_with(PORTS), typed_plan(), checks) == []


def test_mesh_one_node_behind_a_small_mtu_names_node_netdev_and_switch_port() -> None:
    findings = run.mesh_findings(inv_with(PORTS), typed_plan(), mesh_checks("spark3", "a", "mtu"))
    assert findings == [
        Finding(
            "spark3",
            "enp1s0f1np1 (switch port swp3)",
            "9000-byte frames are dropped between spark3 and every peer (small pings pass): "
            "the MTU "
            "on spark3's path enp1s0f1np1 (switch port swp3) is below 9000",
        )
    ]


def test_mesh_pulled_cable_is_no_peer_reaches() -> None:
    findings = run.mesh_findings(
        inv_with(PORTS), typed_plan(), mesh_checks("spark2", "b", "unreachable")
    )
    assert findings == [
        Finding(
            "spark2",
            "enP2p1s0f1np1 (switch port swp6)",
            "no peer reaches spark2 on twin b and it reaches none, while the others reach each "
            "other: spark2's link on enP2p1s0f1np1 (switch port swp6)",
        )
    ]


def test_mesh_port_carrying_both_twins_and_a_node_without_ports() -> None:
    ports = [SwitchPort("Ethernet12", "spark2", "both")]
    findings = run.mesh_findings(
        inv_with(ports), typed_plan(), mesh_checks("spark2", "b", "unreachable")
    )
    assert [f.subject for f in findings] == ["enP2p1s0f1np1 (switch port Ethernet12)"]
    findings = run.mesh_findings(inv_with([]), typed_plan(), mesh_checks("spark2", "a", "mtu"))
    assert [(f.host, f.subject) for f in findings] == [("spark2", "enp1s0f1np1")]


def test_mesh_of_a_node_that_did_not_answer_blames_no_link() -> None:
    """spark2 refused over management: its own pings are skipped, the peers reach it."""
    checks = [
        Check(c.check, c.host, c.subject, "skipped", "spark2 did not answer")
        if c.host == "spark2"
        else c
        for c in mesh_checks()
    ]
    assert run.mesh_findings(inv_with(PORTS), typed_plan(), checks) == []


def test_a_node_that_does_not_answer_is_marked_down_and_its_checks_skipped(tmp_path: Path) -> None:
    """The real check suite against a closed port: reachable fails with ssh's reason, every
    other check of the node is skipped (the plugin and the tests share the down list)."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(make_plan()))
    cfg = tmp_path / "ssh_config"
    # a socket's path must stay under 108 bytes (sun_path), which a pytest-xdist worker's
    # tmp_path can exceed: the control sockets go to a short directory, as sparkctl's do
    sockets = Path(tempfile.mkdtemp(prefix="cm-", dir="/tmp"))
    cfg.write_text(
        f"Host spark2\n  HostName 127.0.0.1\n  Port 9\n  BatchMode yes\n"
        f"  StrictHostKeyChecking yes\n  UserKnownHostsFile {tmp_path}/kh\n"
        f"  ControlMaster auto\n  ControlPath {sockets}/%C\n"
        "  ConnectTimeout 3\n"
    )
    try:
        checks, _, down = run.run_node_checks(plan, cfg, ["spark2"], tmp_path / "run")
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert down == {"spark2"}
    reach = by_check(checks, "reachable")
    assert [(c.outcome, c.message) for c in reach] == [
        (
            "failed",
            "spark2 does not answer over SSH: ssh: connect to host 127.0.0.1 port 9: "
            "Connection refused",
        )
    ]
    others = [c for c in checks if c.check != "reachable"]
    assert len(others) > 10 and {c.outcome for c in others} == {"skipped"}, {
        (c.check, c.outcome, c.message[:80]) for c in others if c.outcome != "skipped"
    }


def test_mesh_every_path_failing_is_not_one_node() -> None:
    checks = [
        Check(c.check, c.host, c.subject, "failed", "smaller MTU")
        if c.subject and c.subject.startswith("enp1s0f1np1")
        else c
        for c in mesh_checks()
    ]
    assert run.mesh_findings(inv_with(PORTS), typed_plan(), checks) == []


# ---------------------------------------------------------------- report verdict, summary, exit

TH = Thresholds(line_rate_gbytes=0.125, min_fraction=0.875, judged_sizes=2, baseline_tolerance=0.1)


def report(**parts: Any) -> Report:
    return Report(
        run_id="20261130T070000Z-validate",
        cluster="sim",
        inventory="inventory/sim.ini",
        started="2026-11-30T07:00:00Z",
        sparkctl_version="0.1.0",
        hosts=list(NODES),
        thresholds=TH,
        **parts,
    )


def all_run(
    collective: str,
    outcome: Outcome,
    scope: Literal["all", "pair"] = "all",
    hosts: list[str] = NODES,
) -> NcclRun:
    return NcclRun(
        collective=collective,
        scope=scope,
        hosts=list(hosts),
        outcome=outcome,
        message="busbw ...",
        judged=[Judged(size=16 << 20, busbw=0.11, fraction=0.88, wrong=0)],
    )


def baseline(outcome: str) -> Baseline:
    return Baseline(
        path="/state/results/sim/20261129T070000Z-validate",
        tolerance=0.1,
        run_id="20261129T070000Z-validate",
        items=[BaselineItem("all_reduce", 16 << 20, 0.11, 0.05, -0.545, outcome)],  # type: ignore[arg-type]
        outcome=outcome,  # type: ignore[arg-type]
        message="all_reduce 16 MiB: 0.050 GB/s, 55% below 0.110",
    )


PASSED = Check("clock", "spark1", None, "passed", "offset +12 us, stratum 3")
SKIPPED = Check("gpu", "spark1", None, "skipped", "no GPU in the lab")


def test_verdict_rules() -> None:
    assert report().verdict == "passed"
    assert (
        report(
            checks=[PASSED, SKIPPED],
            nccl=[all_run("all_reduce", "passed"), all_run("all_gather", "skipped")],
        ).verdict
        == "passed"
    )
    # A failing pair does not fail the run: only the all-node gate does.
    assert (
        report(
            nccl=[
                all_run("all_reduce", "passed"),
                all_run("all_reduce", "failed", "pair", ["spark1", "spark3"]),
            ]
        ).verdict
        == "passed"
    )
    failed = Check("clock", "spark2", None, "failed", "x")
    assert report(checks=[PASSED, failed]).verdict == "failed"
    assert report(checks=[Check("suite", "spark2", None, "error", "x")]).verdict == "failed"
    assert report(nccl=[all_run("all_reduce", "failed")]).verdict == "failed"
    assert report(nccl=[all_run("all_reduce", "error")]).verdict == "failed"
    assert report(baseline=baseline("failed")).verdict == "failed"
    assert report(baseline=baseline("passed")).verdict == "passed"
    # Not judged: nothing failed, and one all-node run cannot be vouched for. Anything
    # that failed still makes it failed.
    unjudged = all_run("all_gather", "not_judged")
    assert report(nccl=[all_run("all_reduce", "passed"), unjudged]).verdict == "not_judged"
    assert report(checks=[failed], nccl=[unjudged]).verdict == "failed"
    assert report(nccl=[all_run("all_reduce", "failed"), unjudged]).verdict == "failed"
    assert report(nccl=[unjudged], baseline=baseline("failed")).verdict == "failed"
    assert (
        report(nccl=[all_run("all_reduce", "not_judged", "pair", ["spark1", "spark3"])]).verdict
        == "passed"
    )


def test_failure_summary_where_to_look_first() -> None:
    rep = report(
        checks=[
            PASSED,
            Check("mesh", "spark3", "enp1s0f1np1 -> spark1", "failed", "MTU"),
            Check("neighbours", "cluster", None, "failed", "x"),
        ],
        nccl=[
            all_run("all_reduce", "failed"),
            all_run("all_gather", "failed"),
            all_run("all_reduce", "failed", "pair", ["spark1", "spark3"]),
        ],
        localisation=[
            Finding("spark3", "enp1s0f1np1 (switch port swp3)", "..."),
            Finding("cluster", None, "every pair passes on its own"),
        ],
        baseline=baseline("failed"),
    )
    assert run.failure_summary(rep) == (
        "validation failed: look at spark3 enp1s0f1np1 (switch port swp3); failed checks on "
        "cluster (neighbours), spark3 (mesh); bandwidth gate failed: all_reduce, all_gather; "
        "regression against 20261129T070000Z-validate: all_reduce 16 MiB: 0.050 GB/s, "
        "55% below 0.110"
    )


def test_failure_summary_of_a_finding_without_subject_and_of_nothing() -> None:
    assert (
        run.failure_summary(report(localisation=[Finding("spark2", None, "...")]))
        == "validation failed: look at spark2"
    )
    assert run.failure_summary(report()) == "validation failed: sim"


def test_exit_code_and_summary_of_a_run_not_judged() -> None:
    message = (
        "not judged on bandwidth: 3.2 GiB free on spark3 (MemAvailable), the least of any "
        "node; stop the server (sparkctl validate --stop-serving) or free memory, then "
        "validate again: the sweep's top, 512 MiB, is below 1 GiB, ..."
    )
    rep = report(nccl=[all_run("all_gather", "not_judged")])
    rep.nccl[0] = replace(rep.nccl[0], message=message)
    assert run.exit_code(rep) == ExitCode.NOT_JUDGED and int(ExitCode.NOT_JUDGED) == 8
    assert run.failure_summary(rep) == (
        "validation not judged: bandwidth gate not judged: all_gather (not judged on "
        "bandwidth: 3.2 GiB free on spark3 (MemAvailable), the least of any node)"
    )
    unreachable = Check("reachable", "spark4", None, "failed", "no answer")
    assert run.exit_code(report(checks=[unreachable], nccl=rep.nccl)) == ExitCode.UNREACHABLE


def test_exit_code() -> None:
    unreachable = Check("reachable", "spark4", None, "failed", "no answer")
    suite = Check("suite", "spark2", None, "error", "the node checks did not run")
    assert run.exit_code(report(checks=[PASSED, unreachable])) == ExitCode.UNREACHABLE
    assert int(ExitCode.UNREACHABLE) == 3 and int(ExitCode.CHECKS_FAILED) == 1
    assert run.exit_code(report(checks=[suite])) == ExitCode.UNREACHABLE
    assert (
        run.exit_code(report(checks=[Check("clock", "spark2", None, "failed", "x")]))
        == ExitCode.CHECKS_FAILED
    )
    assert (
        run.exit_code(
            report(
                checks=[Check("reachable", "spark2", None, "skipped", "x")],
                nccl=[all_run("all_reduce", "failed")],
            )
        )
        == ExitCode.CHECKS_FAILED
    )


# ---------------------------------------------------------------- baseline


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state"
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(path))
    return path


def test_last_good_missing_is_bad_input(state: Path) -> None:
    with pytest.raises(SparkctlError) as info:
        run.resolve_baseline("last-good", "sim")
    assert info.value.code == ExitCode.BAD_INPUT
    assert str(info.value) == f"no last-good run for sim yet ({state}/results/sim/last-good)"
    assert info.value.hint == "a validate run that passes becomes last-good"


def test_last_good_resolves_to_the_run_directory(state: Path) -> None:
    results = state / "results" / "sim"
    run_dir = results / "20261130T070000Z-validate"
    run_dir.mkdir(parents=True)
    (results / "last-good").symlink_to(run_dir.name)  # relative, as validate links it
    assert run.last_good_link("sim") == results / "last-good"
    assert run.resolve_baseline("last-good", "sim") == run_dir.resolve()
    # Another cluster's last-good is not this one's.
    with pytest.raises(SparkctlError, match="no last-good run for lab yet"):
        run.resolve_baseline("last-good", "lab")


def test_a_dangling_last_good_is_missing(state: Path) -> None:
    results = state / "results" / "sim"
    results.mkdir(parents=True)
    (results / "last-good").symlink_to("20261101T000000Z-validate")
    with pytest.raises(SparkctlError, match="no last-good run for sim yet"):
        run.resolve_baseline("last-good", "sim")


def test_a_baseline_path(state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report_json = tmp_path / "old" / "report.json"
    report_json.parent.mkdir()
    report_json.write_text("{}")
    assert run.resolve_baseline(str(report_json), "sim") == report_json
    assert run.resolve_baseline(str(report_json.parent), "sim") == report_json.parent
    monkeypatch.setenv("HOME", str(tmp_path))
    assert run.resolve_baseline("~/old", "sim") == report_json.parent


def test_a_baseline_path_that_does_not_exist_is_bad_input(state: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "report.json"
    with pytest.raises(SparkctlError) as info:
        run.resolve_baseline(str(missing), "sim")
    assert info.value.code == ExitCode.BAD_INPUT
    assert str(info.value) == (
        f"{missing}: no such baseline (give a run directory, its report.json, or last-good)"
    )


# ---------------------------------------------------------------- thresholds and line rate


def test_thresholds_from_the_plan() -> None:
    assert run.thresholds(typed_plan(), 0.125) == Thresholds(
        line_rate_gbytes=0.125,
        min_fraction=0.875,
        judged_sizes=2,
        baseline_tolerance=0.1,
        calibrated_bytes=1073741824,
    )


class Answers:
    """A fake runner: one answer, every call recorded."""

    def __init__(self, rc: int = 0, out: str = "") -> None:
        self.rc, self.out = rc, out
        self.calls: list[tuple[str, str, int]] = []

    def __call__(self, host: str, command: str, timeout: int) -> tuple[int, str]:
        self.calls.append((host, command, timeout))
        return self.rc, self.out


@pytest.mark.parametrize("value", [25.0, "25", 25, 0.125])
def test_line_rate_is_the_inventorys(value: Any) -> None:
    assert run.line_rate(typed_plan(line_rate=value)) == float(value)


@pytest.mark.parametrize("value", [None, "", "None", 0])
def test_an_unset_line_rate_is_bad_input(value: Any) -> None:
    with pytest.raises(SparkctlError) as info:
        run.line_rate(typed_plan(line_rate=value))
    assert info.value.code == ExitCode.BAD_INPUT
    assert "validate_line_rate_gbytes is" in str(info.value)
    assert info.value.hint is not None and "validate_line_rate_gbytes" in info.value.hint


# ---------------------------------------------------------------- perftest


def test_perftest_skipped_by_the_inventory(tmp_path: Path) -> None:
    runner = Answers(0)
    for setting in (False, "false", "no"):
        result = run.perftest(
            typed_plan(perftest=setting), NODES, runner, th=TH, run_dir=tmp_path, setting=setting
        )
        assert result == ([], ["ib_write_bw: skipped (validate_perftest: false)"])
    assert runner.calls == []


NO_PERFTEST = (
    "(no perftest or no RDMA devices; the lab has neither): RDMA write bandwidth not measured"
)


def test_perftest_missing_is_a_note_unless_required(tmp_path: Path) -> None:
    runner = Answers(1)
    checks, notes = run.perftest(
        typed_plan(), NODES, runner, th=TH, run_dir=tmp_path, setting="auto"
    )
    note = f"ib_write_bw: not available on spark1, spark2, spark3, spark4 {NO_PERFTEST}"
    assert (checks, notes) == ([], [note])
    assert [c[0] for c in runner.calls] == NODES
    assert all(c[1].startswith("command -v ib_write_bw") for c in runner.calls)
    checks, notes = run.perftest(
        typed_plan(perftest=True), NODES, Answers(1), th=TH, run_dir=tmp_path, setting=True
    )
    assert notes == []
    assert checks == [Check("rdma_write", n, None, "failed", note) for n in NODES]


def test_perftest_missing_on_one_node_names_it(tmp_path: Path) -> None:
    def runner(host: str, command: str, timeout: int) -> tuple[int, str]:
        return (1 if host == "spark3" else 0), ""

    checks, notes = run.perftest(
        typed_plan(), NODES, runner, th=TH, run_dir=tmp_path, setting="yes"
    )
    assert notes == []
    assert checks == [
        Check(
            "rdma_write",
            "spark3",
            None,
            "failed",
            f"ib_write_bw: not available on spark3 {NO_PERFTEST}",
        )
    ]


# ---------------------------------------------------------------- the plan's cache key


def inventory_dir(tmp_path: Path) -> Path:
    base = tmp_path / "inv"
    (base / "group_vars" / "sim").mkdir(parents=True)
    ini = base / "cluster.ini"
    ini.write_text(
        "[sparks]\nspark1 ansible_host=10.77.0.11 node_rank=0 "
        "fabric_a_ip=192.168.100.11 fabric_b_ip=192.168.101.11\n"
        "[sim:children]\nsparks\n"
    )
    (base / "group_vars" / "sim" / "cluster.yml").write_text("validate_busbw_min_fraction: 0.875\n")
    return ini


def test_plan_key_is_stable_and_follows_the_inventory(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ini = inventory_dir(tmp_path)
    first = plan_cache._plan_key(ini)
    assert len(first) == 20 and plan_cache._plan_key(ini) == first
    (tmp_path / "unrelated.yml").write_text("x: 1\n")
    assert plan_cache._plan_key(ini) == first

    (ini.parent / "group_vars" / "sim" / "cluster.yml").write_text(
        "validate_busbw_min_fraction: 0.5\n"
    )
    second = plan_cache._plan_key(ini)
    assert second != first

    (ini.parent / "host_vars").mkdir()
    (ini.parent / "host_vars" / "spark1.yml").write_text("validate_perftest: false\n")
    third = plan_cache._plan_key(ini)
    assert third not in (first, second)

    ini.write_text(ini.read_text() + "# a comment\n")
    fourth = plan_cache._plan_key(ini)
    assert fourth not in (first, second, third)

    # A filter plugin (not a defaults file) changes the plan too: the key follows it.
    roles, collection_dir = tmp_path / "collection-copy", paths.collection_dir
    shutil.copytree(collection_dir(), roles, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(plan_cache, "collection_dir", lambda: roles)
    copied = plan_cache._plan_key(ini)
    assert copied != fourth  # the paths are part of the key
    plugin = next(roles.glob("plugins/filter/*.py"))
    plugin.write_text(plugin.read_text() + "\n# an edit\n")
    assert plan_cache._plan_key(ini) != copied
    (plugin.parent / "__pycache__").mkdir(exist_ok=True)
    (plugin.parent / "__pycache__" / "x.pyc").write_bytes(b"bytecode")
    edited = plan_cache._plan_key(ini)
    (plugin.parent / "__pycache__" / "x.pyc").write_bytes(b"other bytecode")
    assert plan_cache._plan_key(ini) == edited
    monkeypatch.setattr(plan_cache, "collection_dir", collection_dir)
    assert plan_cache._plan_key(ini) == fourth

    # Plans are cached per state directory (the lab and a real cluster keep theirs apart).
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "other-state"))
    assert plan_cache._plan_key(ini) != fourth


# ---------------------------------------------------------------- ssh_config


@pytest.fixture
def cm_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The ControlMaster sockets go under a private directory of the state dir (pytest's
    tmp_path is too deep for a socket path: a short one beside it)."""
    state = Path(tempfile.mkdtemp(prefix="st-", dir="/tmp"))
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(state))
    yield state / "ssh-cm"
    shutil.rmtree(state, ignore_errors=True)


def entry(hostvars: dict[str, Any], name: str = "spark2") -> dict[str, list[str]]:
    """host_entry's options as {lower-case key: [values in order]}."""
    lines = sshconfig.host_entry(name, hostvars)
    assert lines[0] == f"Host {name}"
    out: dict[str, list[str]] = {}
    for line in lines[1:]:
        assert line.startswith("  ")
        key, _, value = line.strip().partition(" ")
        out.setdefault(key.lower(), []).append(value)
    return out


def ssh_effective(config: Path, host: str) -> dict[str, str]:
    """What ssh itself makes of the file (``ssh -G`` prints the options; it connects nowhere)."""
    if shutil.which("ssh") is None:
        pytest.skip("ssh is not installed")
    proc = subprocess.run(
        ["ssh", "-G", "-F", str(config), host],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def test_host_entry_from_ansible_connection_vars(
    cm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    opts = entry(
        {
            "ansible_host": "10.77.0.12",
            "ansible_user": "nvidia",
            "ansible_port": "2222",
            "ansible_ssh_private_key_file": "~/.ssh/id_sparkctl_cluster",
        }
    )
    assert opts["hostname"] == ["10.77.0.12"] and opts["user"] == ["nvidia"]
    assert opts["port"] == ["2222"]
    assert opts["identityfile"] == [f"{tmp_path}/.ssh/id_sparkctl_cluster"]
    assert opts["identitiesonly"] == ["yes"]
    assert opts["stricthostkeychecking"] == ["yes"] and opts["batchmode"] == ["yes"]
    assert opts["passwordauthentication"] == ["no"]
    assert opts["controlmaster"] == ["auto"] and opts["controlpersist"] == ["300"]
    assert opts["controlpath"] == [f"{cm_dir}/%C"]
    assert cm_dir.is_dir() and (cm_dir.stat().st_mode & 0o777) == 0o700


def test_host_entry_minimal_and_the_older_key_variable(cm_dir: Path) -> None:
    opts = entry({})
    assert opts["hostname"] == ["spark2"]
    assert "user" not in opts and "port" not in opts and "identityfile" not in opts
    opts = entry({"ansible_private_key_file": "/keys/id"})
    assert opts["identityfile"] == ["/keys/id"]


def test_ssh_args_options_are_kept_in_every_spelling(cm_dir: Path) -> None:
    opts = entry(
        {
            "ansible_ssh_common_args": "-o ProxyJump=admin@10.0.0.1 -oServerAliveInterval=5",
            "sparkctl_known_hosts_file": "/etc/sparkctl/known_hosts",
            # sparkctl's own (playbooks/group_vars/all): the known_hosts file, once
            "ansible_ssh_extra_args": "-o UserKnownHostsFile=/etc/sparkctl/known_hosts",
        }
    )
    assert opts["proxyjump"] == ["admin@10.0.0.1"]
    assert opts["serveraliveinterval"] == ["5", "10"]  # the inventory's first: ssh takes it
    assert opts["userknownhostsfile"] == ["/etc/sparkctl/known_hosts"]


def test_the_known_hosts_file_is_sparkctl_s_one(cm_dir: Path, tmp_path: Path) -> None:
    """ssh's default, or sparkctl_known_hosts_file; never a second one, never a value
    that is not one file."""
    assert entry({})["userknownhostsfile"] == [str(Path("~/.ssh/known_hosts").expanduser())]
    for value in ("/dev/null x", "~/kh%h", "~", "/a/../kh"):
        with pytest.raises(SparkctlError) as info:
            sshconfig.host_entry("spark2", {"sparkctl_known_hosts_file": value})
        assert info.value.code == ExitCode.BAD_INPUT
        assert str(info.value).startswith("host spark2: variable sparkctl_known_hosts_file:")


@pytest.mark.parametrize(
    ("args", "shown", "why"),
    [
        ("-o StrictHostKeyChecking=no", "StrictHostKeyChecking=no", "would accept host keys"),
        (
            "-o StrictHostKeyChecking=accept-new",
            "StrictHostKeyChecking=accept-new",
            "would accept host keys",
        ),
        ("-o 'StrictHostKeyChecking no'", "StrictHostKeyChecking no", "would accept host keys"),
        ("-ostricthostkeychecking=off", "stricthostkeychecking=off", "would accept host keys"),
        ("-o 'StrictHostKeyChecking = no'", "StrictHostKeyChecking = no", "would accept host keys"),
        (
            "-o BatchMode=no -o PasswordAuthentication=yes",
            "BatchMode=no",
            "is not a value sparkctl passes on",
        ),
        (
            "-o 'KnownHostsCommand ssh-keyscan %H'",
            "KnownHostsCommand ssh-keyscan %H",
            "runs a command on the controller and lets it vouch for host keys",
        ),
        ("-o HostKeyAlias=spark1", "HostKeyAlias=spark1", "lets another host's recorded key"),
        (
            "-o UserKnownHostsFile=/dev/null",
            "UserKnownHostsFile=/dev/null",
            "names a known_hosts file, which is sparkctl's to pass",
        ),
        (
            "-o 'ProxyCommand=ssh -W %h:%p admin@10.0.0.1'",
            "ProxyCommand=ssh -W %h:%p admin@10.0.0.1",
            "runs a command on the controller (use ProxyJump)",
        ),
    ],
)
def test_an_option_that_weakens_host_keys_or_runs_a_command_is_refused(
    cm_dir: Path, args: str, shown: str, why: str
) -> None:
    """The ssh_config writer refuses what `inventory check` refuses (the same parser,
    rules.connection.ssh_options): nothing reaches the file."""
    for var in ("ansible_ssh_common_args",):
        with pytest.raises(SparkctlError) as info:
            sshconfig.host_entry("spark2", {var: args})
        assert info.value.code == ExitCode.BAD_INPUT
        assert str(info.value).startswith(f"host spark2: variable {var}: {shown!r} {why}")


def test_the_inventory_cannot_move_what_sparkctl_forces(cm_dir: Path) -> None:
    for var in ("ansible_ssh_common_args",):
        opts = entry({var: "-o ControlMaster=no -o ControlPath=/tmp/x -o ControlPersist=no"})
        assert opts["stricthostkeychecking"] == ["yes"]
        assert opts["batchmode"] == ["yes"] and opts["passwordauthentication"] == ["no"]
        assert opts["controlmaster"] == ["auto"] and opts["controlpersist"] == ["300"]
        assert opts["controlpath"] == [f"{cm_dir}/%C"]


@pytest.mark.parametrize(
    ("var", "args", "word"),
    [
        ("ansible_ssh_common_args", "-J admin@10.0.0.1", "-J"),
        ("ansible_ssh_common_args", "-o ProxyJump=x -v", "-v"),
        ("ansible_ssh_common_args", "-o", "-o"),
        ("ansible_ssh_common_args", "ProxyJump=x", "ProxyJump=x"),
    ],
)
def test_anything_but_o_options_is_bad_input_naming_host_and_variable(
    cm_dir: Path, var: str, args: str, word: str
) -> None:
    with pytest.raises(SparkctlError) as info:
        sshconfig.host_entry("spark3", {var: args})
    assert info.value.code == ExitCode.BAD_INPUT
    assert str(info.value) == (
        f"host spark3: variable {var}: sparkctl passes only -o options "
        f"(and -C, -4, -6) to ssh, not {word!r}"
    )


def test_unbalanced_quotes_are_bad_input(cm_dir: Path) -> None:
    with pytest.raises(SparkctlError) as info:
        sshconfig.host_entry(
            "spark3", {"ansible_ssh_common_args": "-o ProxyCommand='ssh -W %h:%p admin@10.0.0.1"}
        )
    assert info.value.code == ExitCode.BAD_INPUT
    assert "host spark3" in str(info.value) and "ansible_ssh_common_args" in str(info.value)


def test_write_one_entry_per_host_private_and_read_by_ssh(cm_dir: Path, tmp_path: Path) -> None:
    hostvars = {
        n: {
            "ansible_host": f"10.77.0.1{n[-1]}",
            "ansible_user": "root",
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes",
            "sparkctl_known_hosts_file": "/etc/sparkctl/kh",
        }
        for n in NODES
    }
    path = sshconfig.write(tmp_path / "ssh_config", hostvars, NODES)
    assert (path.stat().st_mode & 0o777) == 0o600
    text = path.read_text()
    assert text.startswith("# Written by sparkctl validate")
    hosts = [ln for ln in text.splitlines() if ln.startswith("Host ")]
    assert hosts == [f"Host {n}" for n in NODES]
    seen = ssh_effective(path, "spark3")
    assert seen["hostname"] == "10.77.0.13" and seen["user"] == "root"
    assert seen["stricthostkeychecking"] == "true" and seen["batchmode"] == "yes"
    assert seen["passwordauthentication"] == "no" and seen["controlmaster"] == "auto"


def test_smuggled_options_cannot_weaken_host_key_checking(cm_dir: Path, tmp_path: Path) -> None:
    """A tab between key and value is valid for ssh -o; a control character in an option is
    refused before anything is written."""
    args = "-o 'StrictHostKeyChecking\tno' -o 'BatchMode\tno'"
    with pytest.raises(SparkctlError) as err:
        sshconfig.write(
            tmp_path / "ssh_config",
            {"spark1": {"ansible_host": "10.77.0.11", "ansible_ssh_common_args": args}},
            ["spark1"],
        )
    assert err.value.code == ExitCode.BAD_INPUT and "control characters" in err.value.message
    assert not (tmp_path / "ssh_config").exists()


def test_an_option_carrying_a_newline_is_refused(cm_dir: Path, tmp_path: Path) -> None:
    args = "-o 'ProxyJump=admin@10.0.0.1\nStrictHostKeyChecking no'"
    with pytest.raises(SparkctlError) as err:
        sshconfig.write(
            tmp_path / "ssh_config",
            {"spark1": {"ansible_host": "10.77.0.11", "ansible_ssh_common_args": args}},
            ["spark1"],
        )
    assert err.value.code == ExitCode.BAD_INPUT
    assert "spark1" in err.value.message and "ansible_ssh_common_args" in err.value.message


def test_a_plain_inventory_option_reads_the_same_in_ssh(cm_dir: Path, tmp_path: Path) -> None:
    path = sshconfig.write(
        tmp_path / "ssh_config",
        {
            "spark1": {
                "ansible_host": "10.77.0.11",
                "ansible_ssh_common_args": "-o 'StrictHostKeyChecking yes' -o ConnectTimeout=20",
            }
        },
        ["spark1"],
    )
    seen = ssh_effective(path, "spark1")
    assert seen["stricthostkeychecking"] == "true" and seen["connecttimeout"] == "20"


def test_plan_fixture_matches_the_real_plans_shape() -> None:
    plan = make_plan()
    head = plan["hosts"]["spark1"]
    assert json.loads(json.dumps(plan)) == plan
    assert head["nccl"]["socket_ifname"] == head["roce_fabric"]["twins"][0]["netdev"]
    typed = Plan.from_dict(plan)
    assert run._port_of(inv_with(PORTS), typed, "spark3").startswith(
        "enp1s0f1np1 (switch port swp3) or enP2p1s0f1np1 (switch port swp7)"
    )
    assert run._port_of(inv_with([]), typed, "spark3").startswith("enp1s0f1np1 or enP2p1s0f1np1")


def test_port_of_names_the_twin_the_checks_blame() -> None:
    """A node localisation named: the twin its checks (or its peers' mesh pings to it)
    failed on, not always the socket twin a; both twins where nothing tells them apart
    (the pairs run over both: a twin behind a narrower PCIe link passes every check)."""
    typed = Plan.from_dict(make_plan())
    # Nothing failed: both twins, and how to tell them apart.
    both = run._port_of(inv_with(PORTS), typed, "spark3", mesh_checks())
    assert both == (
        "enp1s0f1np1 (switch port swp3) or enP2p1s0f1np1 (switch port swp7): the pairs run "
        "over both twins and the node checks blame neither; ib_write_bw -d on each twin "
        "tells which"
    )
    # Twin b's pings to and from spark3 fail: twin b, not the socket twin a.
    on_b = run._port_of(inv_with(PORTS), typed, "spark3", mesh_checks("spark3", "b", "down"))
    assert on_b == "enP2p1s0f1np1 (switch port swp7), twin b (failed checks: mesh)"
    # spark3's own speed check on twin b.
    slow_b = [Check("twin_speed", "spark3", "enP2p1s0f1np1", "failed", "100000 Mb/s")]
    assert run._port_of(inv_with(PORTS), typed, "spark3", slow_b).startswith(
        "enP2p1s0f1np1 (switch port swp7), twin b (failed checks: twin_speed)"
    )
    # Without RDMA (the lab) NCCL's sockets run over the socket twin alone.
    assert (
        run._port_of(inv_with(PORTS), typed, "spark3", mesh_checks(), rdma=False)
        == "enp1s0f1np1 (switch port swp3)"
    )
    # Another node's failures say nothing about spark3.
    other = [Check("twin_speed", "spark2", "enP2p1s0f1np1", "failed", "100000 Mb/s")]
    assert "blame neither" in run._port_of(inv_with(PORTS), typed, "spark3", other)
