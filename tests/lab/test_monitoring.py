"""The lab's real Prometheus (Debian's package, installed by provision's monitoring role on
sim.ini's [monitoring] host, spark1) scrapes the nodes' exporters and the head's SGLang
metrics, runs sparkctl's rules, and answers every query of the dashboard.

This module needs only the provisioned lab: Prometheus is ready, runs sparkctl's rule
groups, and scrapes every Spark's exporter with the labels the rules join on. The
queries that need SGLang serving run inside tests/lab/test_serve.py, on its one serving
lab (``test_the_lab_prometheus_answers_every_dashboard_query`` there calls
:func:`check_dashboard`): a second serving lab would cost minutes.

sparkctl's own figures: ``sparkctl up`` in test_serve.py writes them on the controller
(SPARKCTL_TEXTFILE_DIR); they reach spark1's textfile directory the way docs/operate.md
("Monitoring with Prometheus", way 3) tells a controller that runs no exporter: copied
under a name the exporter skips, then renamed.
"""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.metrics import METRICS
from tests.conftest import REPO, LabSession
from tests.labhost import ssh

pytestmark = pytest.mark.lab

ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "monitoring"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
RULES = yaml.safe_load((ROLE / "files" / "sparkctl-rules.yml").read_text())
SGLANG_PORT = yaml.safe_load(
    (
        REPO
        / "ansible_collections"
        / "sparkctl"
        / "spark"
        / "roles"
        / "sglang"
        / "defaults"
        / "main.yml"
    ).read_text()
)["sglang_port"]
DASHBOARD = json.loads((REPO / "monitoring" / "grafana" / "sparkctl.json").read_text())
# Grafana's own variable, as tests/unit/test_alert_rules.py gives it: a rate window
# that holds at least two scrapes at the lab's 15 s interval.
RATE_INTERVAL = "1m"
# How long a first scrape (and a second, for rate and increase) may take to arrive:
# polled, never asserted as a duration.
PATIENCE_S = 120.0
# How often the waits below ask Prometheus again: its HTTP API answers a query in
# milliseconds, and a wait that polls every few seconds only adds half a poll to each.
POLL_S = 1.0


def monitoring_host(lab: LabSession) -> str:
    hosts = lab.inventory.groups.get("monitoring", [])
    assert hosts, "inventory/sim.ini names no [monitoring] host"
    return lab.inventory.node(hosts[0]).mgmt_ip


def api(lab: LabSession, path: str, **params: str) -> Any:
    """GET Prometheus' HTTP API on the monitoring host; its ``data``."""
    query = ("?" + urllib.parse.urlencode(params)) if params else ""
    url = f"http://{monitoring_host(lab)}:{DEFAULTS['monitoring_prometheus_port']}{path}{query}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


def wait_for(what: str, probe: Any) -> Any:
    """``probe()`` until it returns something true, within PATIENCE_S; its last value."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            assert value, f"{what}: nothing within {PATIENCE_S:.0f} s"
            return value
        time.sleep(POLL_S)


def targets(lab: LabSession) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = api(lab, "/api/v1/targets")["activeTargets"]
    return data


def test_prometheus_is_ready_and_runs_sparkctls_rule_groups(
    lab: LabSession, provisioned: dict[str, object]
) -> None:
    url = f"http://{monitoring_host(lab)}:{DEFAULTS['monitoring_prometheus_port']}/-/ready"
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200
    groups = api(lab, "/api/v1/rules")["groups"]
    assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in RULES["groups"])
    loaded = {r["name"] for g in groups for r in g["rules"]}
    assert loaded == {r["alert"] for g in RULES["groups"] for r in g["rules"]}


def test_every_sparks_exporter_is_scraped_up_with_its_cluster_and_node(
    lab: LabSession, provisioned: dict[str, object]
) -> None:
    port = DEFAULTS["monitoring_node_exporter_port"]
    want = {(f"{n.mgmt_ip}:{port}", n.name) for n in lab.inventory.nodes}

    def up() -> set[tuple[str, str]]:
        node = [t for t in targets(lab) if t["labels"]["job"] == "node"]
        got = {(t["labels"]["instance"], t["labels"].get("node", "")) for t in node}
        assert got == want, got
        return got if all(t["health"] == "up" for t in node) else set()

    wait_for("every exporter up", up)
    # the exporters' own series carry the labels the rules join on
    result = api(lab, "/api/v1/query", query='node_memory_MemAvailable_bytes{job="node"}')
    assert {(s["metric"]["cluster"], s["metric"]["node"]) for s in result["result"]} == {
        (lab.inventory.cluster, n.name) for n in lab.inventory.nodes
    }


# -------------------------------------------------- with SGLang serving (test_serve.py)
def push_textfiles(lab: LabSession, directory: Path) -> list[str]:
    """sparkctl's files from the controller's SPARKCTL_TEXTFILE_DIR into the monitoring
    host's textfile directory: written as ``.NAME.tmp`` (not ``*.prom``: the exporter
    skips it), then renamed (docs/operate.md, "Monitoring with Prometheus", way 3)."""
    dest = DEFAULTS["monitoring_textfile_dir"]
    names = sorted(p.name for p in directory.glob("sparkctl-*.prom"))
    for name in names:
        data = base64.b64encode((directory / name).read_bytes()).decode()
        ssh(
            monitoring_host(lab),
            f"echo {data} | base64 -d > {dest}/.{name}.tmp && mv {dest}/.{name}.tmp {dest}/{name}",
        )
    return names


def written_metrics(directory: Path) -> set[str]:
    """The sparkctl metrics the controller's files carry (their samples' names)."""
    return {
        m.group(1)
        for p in directory.glob("sparkctl-*.prom")
        for m in re.finditer(r"^(sparkctl_[a-z_]+)[{ ]", p.read_text(), re.MULTILINE)
    }


def panel_queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in DASHBOARD["panels"] for t in p.get("targets", [])]


def check_dashboard(lab: LabSession, textfiles: Path) -> dict[str, str]:
    """Every target up (each Spark's exporter, the SGLang head of each TP group); then
    every panel's query evaluated by the lab's Prometheus returns at least one series,
    but a query on a metric that no source of this lab exports (returned, with why).
    """
    pushed = push_textfiles(lab, textfiles)
    assert "sparkctl-validate-sim.prom" in pushed and "sparkctl-serve-verify-sim.prom" in pushed

    def all_up() -> list[dict[str, Any]]:
        active = targets(lab)
        jobs = {t["labels"]["job"] for t in active}
        assert jobs == {"node", "sglang"}, jobs
        return active if all(t["health"] == "up" for t in active) else []

    active = wait_for("every target up", all_up)
    heads = {
        t["labels"]["group"]: t["labels"]["instance"]
        for t in active
        if t["labels"]["job"] == "sglang"
    }
    head = min(lab.inventory.nodes, key=lambda n: n.rank)
    assert heads == {"main": f"{head.mgmt_ip}:{SGLANG_PORT}"}, heads

    sparkctl_written = written_metrics(textfiles)
    sglang_exported = {
        s["metric"]["__name__"]
        for s in api(lab, "/api/v1/query", query='count by (__name__) ({job="sglang"})')["result"]
    }
    declared = {spec.name: spec for spec in METRICS}
    not_here: dict[str, str] = {}
    for title, expr in panel_queries():
        missing = [
            f"{n} (written by sparkctl {declared[n].writer}, which this run did not write)"
            for n in sorted(set(re.findall(r"\bsparkctl_[a-z_]+", expr)))
            if n in declared and n not in sparkctl_written
        ] + [
            f"{n} (not exported by the lab's SGLang)"
            for n in sorted(set(re.findall(r"sglang:[a-z_]+", expr)))
            if n not in sglang_exported
        ]
        if missing:
            not_here[expr] = f"{title}: " + ", ".join(missing)
            continue
        query = expr.replace("$cluster", lab.inventory.cluster).replace(
            "$__rate_interval", RATE_INTERVAL
        )
        wait_for(
            f"panel {title!r}: {query}",
            lambda q=query: api(lab, "/api/v1/query", query=q)["result"],
        )
    # the sources this lab has answer their panels: every query on node_exporter's series,
    # on SGLang's request gauges and token counter, and on validate's and serve verify's
    checked = {e for _, e in panel_queries()} - set(not_here)
    for must in (
        "node_network_up",
        "node_memory_MemAvailable_bytes",
        "node_textfile_mtime_seconds",
        "sglang:num_running_reqs",
        "sglang:generation_tokens_total",
        "sparkctl_serve_verify_ttft_seconds",
        "sparkctl_fabric_expected_mtu_bytes",
    ):
        assert any(must in e for e in checked), (must, not_here)
    return not_here


def active_alerts(lab: LabSession, name: str) -> list[dict[str, Any]]:
    """The alerts named ``name`` that the lab's Prometheus holds now (pending or firing),
    from its HTTP API (/api/v1/alerts)."""
    alerts: list[dict[str, Any]] = api(lab, "/api/v1/alerts")["alerts"]
    return [a for a in alerts if a["labels"].get("alertname") == name]


def wait_alert(lab: LabSession, name: str, state: str | None, patience_s: float) -> float:
    """Poll until the alert ``name`` is in ``state`` ("firing", "pending") for this lab's
    cluster, or (``state`` None) no longer held at all (cleared); how long that took.
    Polled every POLL_S within ``patience_s``, never asserted as a duration."""
    start = time.monotonic()
    seen: list[dict[str, Any]] = []
    while time.monotonic() - start < patience_s:
        seen = [
            a
            for a in active_alerts(lab, name)
            if a["labels"].get("cluster") == lab.inventory.cluster
        ]
        if (state is None and not seen) or (
            state is not None and any(a["state"] == state for a in seen)
        ):
            return time.monotonic() - start
        time.sleep(POLL_S)
    raise AssertionError(
        f"alert {name} not {state or 'cleared'} within {patience_s:.0f} s; last seen: {seen}"
    )
