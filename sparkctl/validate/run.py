"""``sparkctl validate``: the node checks, the NCCL gate, the report, the baseline.

1. The inventory is checked (exit 2, nothing contacted) and the plan computed
   from it by ``playbooks/validate_plan.yml`` (cached per input).
2. The node checks (``sparkctl/checks``) run as one pytest process per node,
   all nodes at once, each over one SSH connection; the cluster checks are
   computed from what the nodes saw (duplicate addresses, neighbours).
3. nccl-tests runs from the head for each collective; failing or slow runs
   are localised with pairwise runs.
4. The report (report.json, report.html) goes into the run's directory; a
   passing run becomes ``last-good``; ``--baseline`` compares with an earlier one.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sparkctl import (
    __version__,
    console,
    inventory,
    metrics,
    nccl_versions,
    node_state,
    remote,
)
from sparkctl.collection import tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.inventory import Inventory
from sparkctl.lock import inventory_lock
from sparkctl.paths import baseline_path, point_link, state_dir
from sparkctl.plan import Plan
from sparkctl.playbook import results_dir
from sparkctl.remote import Runner
from sparkctl.report.model import Check, Finding, NcclRun, Report, Thresholds
from sparkctl.validate import nccl_judge, nccl_run

CHECKS_DIR = Path(__file__).resolve().parent.parent / "checks"
# Checks whose failure on the socket twin means nccl-tests cannot even start.
_BLOCKING = {"reachable"}


@dataclass
class Options:
    inventory: Inventory  # validated once, by the command (exit 2 before any host)
    baseline: str | None = None  # a run directory, a report.json, or "last-good"
    nccl: bool = True
    collectives: Sequence[str] = ()  # override the inventory's validate_collectives
    extra: Mapping[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ plan
def thresholds(plan: Plan, line_rate: float) -> Thresholds:
    return nccl_judge.thresholds_from(plan.settings.as_mapping(), line_rate)


# ------------------------------------------------------------------ node checks
def run_node_checks(
    plan_file: Path, ssh_config: Path, nodes: Sequence[str], run_dir: Path
) -> tuple[list[Check], dict[str, dict[str, Any]], set[str]]:
    """One pytest process per node, all at once; their results and what they saw."""
    out_dir = run_dir / "checks"
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(node: str) -> tuple[str, int, str]:
        argv = [
            sys.executable,
            "-m",
            "pytest",
            str(CHECKS_DIR),
            "-c",
            str(CHECKS_DIR / "pytest.ini"),
            "--rootdir",
            str(CHECKS_DIR),
            "-q",
            "--no-header",
            "-rN",
            "--sparkctl-plan",
            str(plan_file),
            "--sparkctl-node",
            node,
            "--sparkctl-ssh-config",
            str(ssh_config),
            "--sparkctl-out",
            str(out_dir / f"{node}.json"),
        ]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
            timeout=900,
        )
        (out_dir / f"{node}.log").write_text(proc.stdout + proc.stderr)
        return node, proc.returncode, proc.stdout + proc.stderr

    checks: list[Check] = []
    facts: dict[str, dict[str, Any]] = {}
    down: set[str] = set()
    with ThreadPoolExecutor(max_workers=len(nodes) or 1) as pool:
        for node, rc, output in pool.map(one, nodes):
            result = out_dir / f"{node}.json"
            if rc not in (0, 1) or not result.is_file():
                tail = [ln for ln in output.splitlines() if ln.strip()][-3:]
                checks.append(
                    Check(
                        "suite",
                        node,
                        None,
                        "error",
                        f"the node checks did not run (pytest exit {rc}): " + " | ".join(tail),
                    )
                )
                down.add(node)
                continue
            data = json.loads(result.read_text())
            checks += [Check(**c) for c in data["checks"]]
            facts.update(data["facts"])
            down |= set(data.get("down", {}))
    return checks, facts, down


def cluster_checks(plan: Plan, facts: dict[str, dict[str, Any]], down: set[str]) -> list[Check]:
    """Across nodes: no address on two nodes, every neighbour is the node that owns the address."""
    checks: list[Check] = []
    owners: dict[str, list[str]] = {}
    for node, seen in facts.items():
        for ifname, addrs in seen.get("addresses", {}).items():
            for addr in addrs:
                ip = ipaddress.ip_interface(addr).ip
                if ip.is_loopback or ip.is_link_local:
                    continue  # every host has 127.0.0.1: only routable addresses must be unique
                owners.setdefault(str(ip), []).append(f"{node} {ifname}")
    fabric = {node.fabric_ip(t) for node in plan.hosts.values() for t in ("a", "b")}
    dups = {a: o for a, o in owners.items() if len({x.split()[0] for x in o}) > 1}
    if not facts:
        checks.append(
            Check("unique_addresses", "cluster", None, "skipped", "no node reported its addresses")
        )
    elif dups:
        for addr, where in sorted(dups.items()):
            checks.append(
                Check(
                    "unique_addresses",
                    "cluster",
                    addr,
                    "failed",
                    f"{addr} is configured on {' and '.join(where)}",
                )
            )
    else:
        checks.append(
            Check(
                "unique_addresses",
                "cluster",
                None,
                "passed",
                f"{len(owners)} addresses on {len(facts)} nodes, none twice",
            )
        )
    checks += _neighbour_checks(plan, facts, fabric)
    if down:
        checks.append(
            Check(
                "all_nodes", "cluster", None, "failed", f"no answer from {', '.join(sorted(down))}"
            )
        )
    return checks


def mesh_findings(inv: inventory.Inventory, plan: Plan, checks: Sequence[Check]) -> list[Finding]:
    """From the mesh pings: the node whose every path on a twin fails while others work."""
    nodes = plan.nodes
    findings = []
    for twin in ("a", "b"):
        netdev = {n: plan.node(n).roce_fabric.twin(twin).netdev for n in nodes}
        ok: dict[frozenset[str], bool] = {}
        jumbo_only: dict[str, bool] = {}
        for c in checks:
            if c.check != "mesh" or not c.subject or c.subject.split()[0] != netdev[c.host]:
                continue
            if c.outcome == "skipped":  # its node did not answer: no evidence either way
                continue
            peer = c.subject.split()[-1]
            key = frozenset((c.host, peer))
            ok[key] = ok.get(key, True) and c.outcome == "passed"
            if c.outcome != "passed":
                # "jumbo only": every failure on the node's paths passed small pings.
                mtu_kind = c.outcome == "failed" and "smaller MTU" in c.message
                for who in (c.host, peer):
                    jumbo_only[who] = jumbo_only.get(who, True) and mtu_kind
        mtu = plan.node(nodes[0]).roce_fabric.mtu
        for node in nccl_judge.implicated(ok, nodes):
            ports = [p.name for p in inv.ports if p.node == node and p.twin in (twin, "both")]
            place = f"{netdev[node]}" + (f" (switch port {', '.join(ports)})" if ports else "")
            what = (
                f"{mtu}-byte frames are dropped between {node} and every peer (small pings "
                f"pass): the MTU on {node}'s path {place} is below {mtu}"
                if jumbo_only.get(node)
                else f"no peer reaches {node} on twin {twin} and it reaches none, while the "
                f"others reach each other: {node}'s link on {place}"
            )
            findings.append(Finding(node, place, what))
    return findings


def _neighbour_checks(
    plan: Plan, facts: dict[str, dict[str, Any]], fabric: set[str]
) -> list[Check]:
    """The MAC that answered for each fabric address must be its owner's twin."""
    checks: list[Check] = []
    mac_of = {
        node.fabric_ip(t): (n, t, facts.get(n, {}).get("mac", {}).get(t))
        for n, node in plan.hosts.items()
        for t in ("a", "b")
    }
    wrong = []
    for observer, seen in facts.items():
        for addr, mac in seen.get("neigh", {}).items():
            owner, twin, want = mac_of.get(addr, (None, None, None))
            if addr in fabric and mac and want and mac.lower() != want.lower():
                wrong.append(
                    f"{observer} reached {addr} at {mac}, which is not {owner}'s "
                    f"twin {twin} ({want}): another host answers for {owner}'s address"
                )
    if wrong:
        checks += [Check("neighbours", "cluster", None, "failed", w) for w in wrong]
    elif facts:
        checks.append(
            Check(
                "neighbours",
                "cluster",
                None,
                "passed",
                "every fabric address answered from its owner's interface",
            )
        )
    return checks


# ------------------------------------------------------------------ line rate
def line_rate(plan: Plan) -> float:
    """The fabric's line rate in GB/s: validate_line_rate_gbytes, whose default is the
    hardware profile's (25 for a Spark's 200 Gb/s port; the lab's inventory sets its
    shaped rate)."""
    value = plan.settings.line_rate_gbytes
    if value is None or value <= 0:
        raise SparkctlError(
            f"validate_line_rate_gbytes is {value!r}: the bandwidth gates need the fabric's "
            "line rate in GB/s",
            ExitCode.BAD_INPUT,
            hint="set validate_line_rate_gbytes in the inventory (25 for a 200 Gb/s port)",
        )
    return value


# ------------------------------------------------------------------ NCCL
def _nccl_record(runner: Runner, head: str, version_file: str) -> dict[str, str]:
    """The nccl role's record on the head (NCCL_HOME, NCCL_VERSION: the pinned build it
    installed); "none" values, as the lab's stand-ins record them, left out."""
    rc, out = runner(head, f"cat {version_file}", 30)
    try:
        record = tool_output.env_file(out) if rc == 0 else {}
    except tool_output.ToolOutputError:
        record = {}
    return {key: value for key, value in record.items() if value and value != "none"}


def nccl_gate(
    inv: inventory.Inventory,
    plan: Plan,
    facts: dict[str, dict[str, Any]],
    runner: Runner,
    *,
    th: Thresholds,
    run_dir: Path,
    collectives: Sequence[str],
    checks: Sequence[Check] = (),
) -> tuple[list[NcclRun], list[Finding], list[str]]:
    nodes = [n.name for n in inv.nodes]
    head = nodes[0]
    hp = plan.node(head)
    v, n_plan = hp.validate, hp.nccl
    free = {n: int(facts[n]["mem_available"]) for n in nodes if "mem_available" in facts.get(n, {})}
    mem = list(free.values())
    max_bytes = nccl_run.sweep_max(mem, v.nccl_mem_fraction, v.nccl_max_bytes, v.nccl_min_bytes)
    least = min(free, key=lambda n: free[n]) if free else None
    min_bytes = min(v.nccl_min_bytes, max_bytes)
    as_root = hp.base.cluster_user == "root"
    record = _nccl_record(runner, head, n_plan.version_file)
    nccl_home, pinned = record.get("NCCL_HOME"), record.get("NCCL_VERSION")
    rdma = n_plan.rdma_expected
    notes = [
        f"sweep {nccl_judge.human(min_bytes)} .. {nccl_judge.human(max_bytes)}: "
        "the largest buffer from "
        f"the least available memory ({min(mem) / 2**30:.1f} GiB)"
        if mem
        else f"sweep up to {nccl_judge.human(max_bytes)} (no memory reading)"
    ]

    def launch(collective: str, hosts: Sequence[str], lo: int) -> nccl_run.Launch:
        return nccl_run.Launch(
            collective=collective,
            hosts=tuple(hosts),
            addresses=tuple(plan.node(h).fabric_a_ip for h in hosts),
            tests_dir=n_plan.tests_dir,
            env_file=n_plan.env_file,
            env_keys=tuple(sorted(n_plan.env)),
            min_bytes=lo,
            max_bytes=max_bytes,
            iters=v.nccl_iters,
            warmup=v.nccl_warmup_iters,
            timeout=v.nccl_timeout,
            as_root=as_root,
            nccl_home=nccl_home,
        )

    runs: list[NcclRun] = []
    for collective in collectives:
        # all_reduce from decode's message sizes (validate_nccl_latency_min_bytes): the
        # report's latency by size; the gate fits and judges the largest sizes only.
        lo = min(min_bytes, v.nccl_latency_min_bytes) if collective == "all_reduce" else min_bytes
        console.progress(
            f"nccl-tests {collective}: {len(nodes)} ranks, "
            f"{nccl_judge.human(lo)} .. {nccl_judge.human(max_bytes)}"
        )
        result = nccl_run.run(
            launch(collective, nodes, lo),
            runner,
            th,
            run_dir / f"nccl-{collective}.log",
            rdma_expected=rdma,
            pinned_nccl=pinned,
        )
        if result.outcome == "not_judged" and result.message.startswith(nccl_judge.NOT_CALIBRATED):
            result = replace(result, message=_not_calibrated(result.message, least, facts))
        console.progress(f"nccl-tests {collective}: {result.outcome}: {result.message}")
        runs.append(result)

    findings: list[Finding] = []
    # A run not judged (its transport unseen) says nothing a pair would localise.
    failing = [r for r in runs if r.outcome not in ("passed", "not_judged")]
    if failing and v.localise and len(nodes) > 2:
        collective = failing[0].collective
        # Up to a quarter of the largest size, over as many sizes as the gate fits, so
        # each pair is judged with the same fit: enough to tell a slow port from a good
        # one, and a quarter of the time at a quarter of the rate.
        size = max(min_bytes, max_bytes >> 2)
        low = max(min_bytes, size >> max(0, nccl_judge.fitted_sizes(th.judged_sizes) - 1))
        console.progress(
            f"localising: pairwise {collective} {nccl_judge.human(low)} .. "
            f"{nccl_judge.human(size)} over {len(nodes)} nodes"
        )
        pairs = nccl_run.run_pairs(
            lambda p: replace(launch(collective, p, low), max_bytes=size),
            runner,
            th,
            run_dir,
            nodes,
            rdma_expected=rdma,
            pinned_nccl=pinned,
        )
        runs += pairs
        threshold = th.threshold_for(collective)
        findings = nccl_judge.localise(
            pairs, nodes, lambda n: _port_of(inv, plan, n, checks, rdma=rdma), threshold
        )
        notes += [v.line() for v in nccl_judge.pair_verdicts(pairs, threshold)]
    return runs, findings, notes


def _not_calibrated(message: str, least: str | None, facts: dict[str, dict[str, Any]]) -> str:
    """A run whose sweep topped below the calibrated size: which node's memory held it
    there, and what lets the gate judge."""
    if least is None:
        return message
    free = int(facts[least]["mem_available"]) / 2**30
    where = facts[least].get("mem_available_from", "MemAvailable")
    head, sep, rest = message.partition(": ")
    return (
        f"{head}: {free:.1f} GiB free on {least} ({where}), the least of any node; stop the "
        f"server (sparkctl validate --stop-serving) or free memory, then validate again{sep}"
        f"{rest}"
    )


def _port_of(
    inv: inventory.Inventory,
    plan: Plan,
    node: str,
    checks: Sequence[Check] = (),
    *,
    rdma: bool = True,
) -> str:
    """Where to look on a node localisation named: the twin its node checks blame (its
    own checks on that twin's netdev, or peers' mesh pings to it on that twin), with
    the switch port it is cabled to; both twins where the checks blame neither or both.
    Over RDMA nccl-tests runs over both twins (NCCL_IB_HCA) and its pairs cannot tell
    them apart: a twin behind a narrower PCIe link passes every link check. Without
    RDMA (the lab) NCCL's sockets use the socket twin (NCCL_SOCKET_IFNAME) alone."""
    fabric = plan.node(node).roce_fabric
    if not rdma:
        socket_if = plan.node(node).nccl.socket_ifname
        used = next((t.twin for t in fabric.twins if t.netdev == socket_if), None)
        fabric = replace(fabric, twins=tuple(t for t in fabric.twins if t.twin == used))

    def place(twin: str) -> str:
        netdev = fabric.twin(twin).netdev
        ports = [p.name for p in inv.ports if p.node == node and p.twin in (twin, "both")]
        return f"{netdev} (switch port {', '.join(ports)})" if ports else netdev

    def twin_of(host: str, netdev: str) -> str | None:
        twins = plan.hosts[host].roce_fabric.twins if host in plan.hosts else ()
        return next((t.twin for t in twins if t.netdev == netdev), None)

    blamed: dict[str, list[str]] = {}
    for c in checks:
        if c.ok or not c.subject:
            continue
        words = c.subject.split()
        if c.host == node:
            twin = twin_of(node, words[0])
        elif c.check == "mesh" and words[-1] == node:
            twin = twin_of(c.host, words[0])
        else:
            continue
        if twin is not None:
            blamed.setdefault(twin, []).append(c.check)
    blamed = {t: names for t, names in blamed.items() if t in {x.twin for x in fabric.twins}}
    if len(fabric.twins) == 1 and not blamed:
        return place(fabric.twins[0].twin)
    if len(blamed) == 1:
        twin, names = next(iter(blamed.items()))
        return f"{place(twin)}, twin {twin} (failed checks: {', '.join(dict.fromkeys(names))})"
    return (
        " or ".join(place(t.twin) for t in fabric.twins)
        + ": the pairs run over both twins and the node checks blame "
        + ("both" if blamed else "neither")
        + "; ib_write_bw -d on each twin tells which"
    )


def perftest(
    plan: Plan,
    nodes: Sequence[str],
    runner: Runner,
    *,
    th: Thresholds,
    run_dir: Path,
    setting: Any,
) -> tuple[list[Check], list[str]]:
    """ib_write_bw where the nodes have perftest and RDMA devices; a plain note where not."""
    if str(setting).lower() in ("false", "no"):
        return [], ["ib_write_bw: skipped (validate_perftest: false)"]
    missing = []
    for node in nodes:
        rc, _ = runner(
            node, "command -v ib_write_bw >/dev/null && ls /sys/class/infiniband | grep -q .", 30
        )
        if rc != 0:
            missing.append(node)
    if missing:
        note = (
            f"ib_write_bw: not available on {', '.join(missing)} (no perftest or no RDMA "
            "devices; the lab has neither): RDMA write bandwidth not measured"
        )
        if str(setting).lower() in ("true", "yes"):
            return [Check("rdma_write", n, None, "failed", note) for n in missing], []
        return [], [note]
    console.progress("ib_write_bw: both twins between disjoint pairs")
    from sparkctl.validate import perftest as perf  # noqa: PLC0415

    return perf.run_all(plan, nodes, runner, th, run_dir), []


# ------------------------------------------------------------------ the run
def _keep_fingerprint(inv: Inventory, plan: Plan, runner: Runner, run_dir: Path) -> None:
    """What every node is built from, beside the passing run (sparkctl status names what
    drifted from it since)."""
    nodes = remote.node_names(inv)
    sudo = {n: remote.sudo_prefix(plan, n) for n in nodes}
    readings = node_state.read(plan, nodes, runner, sudo)
    image = nccl_versions.load(inv.cluster)
    node_state.save_fingerprint(run_dir, readings, image.versions if image else {})


def node_round(
    inv: inventory.Inventory,
    plan: Plan,
    ssh_cfg: Path,
    nodes: Sequence[str],
    *,
    plan_file: Path,
    out_dir: Path,
) -> tuple[list[Check], dict[str, dict[str, Any]], set[str], list[Finding]]:
    """The node checks and the cluster checks once, their results into ``out_dir``: the
    checks, what the nodes saw, the nodes that did not answer, what the mesh localises."""
    console.progress(f"node checks on {len(nodes)} nodes, in parallel")
    checks, facts, down = run_node_checks(plan_file, ssh_cfg, nodes, out_dir)
    checks += cluster_checks(plan, facts, down)
    # A node that did not answer comes first: nothing else about it is known.
    mesh = [
        Finding(c.host, f"({c.message.removeprefix(c.host + ' ')})", c.message)
        for c in checks
        if c.check in _BLOCKING and c.host in down and not c.ok
    ]
    mesh += mesh_findings(inv, plan, checks)
    return checks, facts, down, mesh


def nodes_without_socket_twin(plan: Plan, checks: Sequence[Check]) -> list[str]:
    """The nodes whose failed checks say nccl-tests cannot run over them: unreachable, or
    their socket twin (NCCL_SOCKET_IFNAME) down or cut off."""
    return sorted(
        {
            c.host
            for c in checks
            if not c.ok
            and (
                c.check in _BLOCKING
                or (
                    c.check in ("twin_up", "mesh")
                    and c.subject
                    and c.subject.split()[0]
                    == (plan.hosts[c.host].nccl.socket_ifname if c.host in plan.hosts else None)
                )
            )
        }
    )


def last_good_link(cluster: str) -> Path:
    return state_dir() / "results" / cluster / "last-good"


def validate(opts: Options) -> tuple[Report, Path]:
    inv = opts.inventory
    baseline_path = resolve_baseline(opts.baseline, inv.cluster) if opts.baseline else None
    nodes = remote.node_names(inv)
    run_dir = results_dir(inv.cluster, "validate")
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with inventory_lock(inv, "validate"):
        session = remote.connect(inv, run_dir, opts.extra)
        plan, ssh_cfg, runner = session.plan, session.ssh_config, session.runner
        checks, facts, down, mesh = node_round(
            inv, plan, ssh_cfg, nodes, plan_file=run_dir / "plan.json", out_dir=run_dir
        )
        rate = line_rate(plan) if nodes[0] not in down else 0.0
        th = thresholds(plan, rate)
        report = Report(
            run_id=run_dir.name,
            cluster=inv.cluster,
            inventory=str(inv.path),
            started=stamp,
            sparkctl_version=__version__,
            hosts=nodes,
            thresholds=th,
            checks=checks,
            localisation=mesh,
        )
        collectives = list(opts.collectives) or list(plan.node(nodes[0]).validate.collectives)
        socket_twin_down = nodes_without_socket_twin(plan, checks)
        if not opts.nccl:
            report.notes.append("nccl-tests: skipped (--no-nccl)")
        elif socket_twin_down:
            report.notes.append(
                f"nccl-tests: not started: {', '.join(socket_twin_down)} cannot "
                "carry it (see the failed checks)"
            )
            report.nccl = [
                NcclRun(
                    c,
                    "all",
                    nodes,
                    "skipped",
                    f"not started: {', '.join(socket_twin_down)} failed checks "
                    "on the socket interface",
                )
                for c in collectives
            ]
        else:
            runs, findings, notes = nccl_gate(
                inv,
                plan,
                facts,
                runner,
                th=th,
                run_dir=run_dir,
                collectives=collectives,
                checks=checks,
            )
            report.nccl = runs
            report.localisation += findings
            report.notes += notes
            # The host NCCL nccl-tests ran, beside the image's from the last serve up.
            host_nccl = nccl_versions.measured(r.report for r in runs if r.scope == "all")
            report.notes += [
                f"warning: {n.text}" if n.warning else n.text
                for n in nccl_versions.validate_notes(inv.cluster, host_nccl)
            ]
            rdma, rdma_notes = perftest(
                plan,
                nodes,
                runner,
                th=th,
                run_dir=run_dir,
                setting=plan.node(nodes[0]).validate.perftest,
            )
            report.checks += rdma
            report.notes += rdma_notes
        from sparkctl import report as report_io  # noqa: PLC0415

        if baseline_path is not None:
            base = report_io.load(baseline_path)
            report.baseline = report_io.compare(
                report, base, str(baseline_path), th.baseline_tolerance
            )
        report.duration_s = time.monotonic() - started
        report_io.write(report, run_dir)
        if report.verdict == "passed":
            _keep_fingerprint(inv, plan, runner, run_dir)
            point_link(last_good_link(inv.cluster), run_dir.name)
    # Prometheus textfile metrics where SPARKCTL_TEXTFILE_DIR is set (docs/monitoring.md)
    metrics.publish_validate(report, plan, facts)
    return report, run_dir


def resolve_baseline(value: str, cluster: str) -> Path:
    return baseline_path(
        value,
        last_good_link(cluster),
        what="run",
        hint="a validate run that passes becomes last-good",
    )


def failure_summary(report: Report) -> str:
    """One line: where to look first (localised nodes), then what else failed."""
    parts = []
    found = [f for f in report.localisation if f.host != "cluster"]
    if found:
        parts.append(
            "look at "
            + "; ".join(f"{f.host}" + (f" {f.subject}" if f.subject else "") for f in found)
        )
    by_host: dict[str, list[str]] = {}
    for c in report.failed_checks():
        names = by_host.setdefault(c.host, [])
        if c.check not in names:
            names.append(c.check)
    if by_host:
        parts.append(
            "failed checks on "
            + ", ".join(
                f"{host} ({', '.join(names[:4])}"
                f"{f' +{len(names) - 4} more' if len(names) > 4 else ''})"
                for host, names in sorted(by_host.items())
            )
        )
    gate = [r.collective for r in report.nccl if r.scope == "all" and r.outcome == "failed"]
    if gate:
        parts.append(f"bandwidth gate failed: {', '.join(gate)}")
    unjudged = [r for r in report.nccl if r.scope == "all" and r.outcome == "not_judged"]
    if unjudged:
        parts.append(
            f"bandwidth gate not judged: {', '.join(r.collective for r in unjudged)} ("
            + (
                unjudged[0].message.split("; ")[0]
                if unjudged[0].message.startswith(nccl_judge.NOT_CALIBRATED)
                else "NCCL's transport not in the log: NCCL_DEBUG=INFO"
            )
            + ")"
        )
    if report.baseline and report.baseline.outcome == "failed":
        parts.append(f"regression against {report.baseline.run_id}: {report.baseline.message}")
    word = "not judged" if report.verdict == "not_judged" else "failed"
    return f"validation {word}: {'; '.join(parts) or report.cluster}"


def exit_code(report: Report) -> ExitCode:
    """3 when a node did not answer, 8 when nothing failed but the gate could not judge,
    else 1."""
    if any(c.check in ("reachable", "suite") and not c.ok for c in report.checks):
        return ExitCode.UNREACHABLE
    if report.verdict == "not_judged":
        return ExitCode.NOT_JUDGED
    return ExitCode.CHECKS_FAILED
