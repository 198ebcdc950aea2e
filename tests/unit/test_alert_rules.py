"""monitoring/: the alert rules pass `promtool check rules` and their unit tests
(`promtool test rules`, Debian's prometheus package); every rule has a firing and a
not-firing case, a `for`, a severity and annotations naming what to run; the tests bite
(a rule without its long-generation guard fails them); and every query of the Grafana
dashboard parses as PromQL (each wrapped in a recording rule for promtool, which has no
expression check of its own in 2.42), returns series when promtool's rule engine evaluates
it over what sparkctl writes and what its sources name, and the dashboard shows every
signal a rule uses.

promtool missing: the test fails under CI and is skipped on a workstation."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]
PROM = REPO / "monitoring" / "prometheus"
# The one copy of the rules is the monitoring role's, which provisioning installs; the
# promtool tests under monitoring/prometheus/tests load it from there.
RULES = (
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "monitoring"
    / "files"
    / "sparkctl-rules.yml"
)
TESTS = sorted((PROM / "tests").glob("*.yml"))
DASHBOARD = REPO / "monitoring" / "grafana" / "sparkctl.json"
# Grafana's own variables, given values a query can be parsed with (a $variable inside a
# label matcher's string is only a string to PromQL).
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [r for group in data["groups"] for r in group["rules"]]


def test_the_rules_have_one_copy_which_every_promtool_test_loads() -> None:
    copies = [
        p
        for p in REPO.rglob("sparkctl-rules.yml")
        if not {".venv", ".git", ".sparkctl-ci"} & set(p.relative_to(REPO).parts)
    ]
    assert copies == [RULES], copies
    for test in TESTS:
        loaded = yaml.safe_load(test.read_text())["rule_files"]
        assert [(test.parent / f).resolve() for f in loaded] == [RULES.resolve()], test


def test_the_rules_check(promtool: str) -> None:
    proc = run([promtool, "check", "rules", str(RULES)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules())} rules found" in proc.stdout


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    assert TESTS
    proc = run([promtool, "test", "rules", *map(str, TESTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_rule_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in rules()}
    assert names - firing == set(), "rules never seen firing"
    assert names - quiet == set(), "rules never seen quiet"
    assert (firing | quiet) - names == set(), "tests of rules that do not exist"


def test_every_rule_says_how_long_how_bad_and_what_to_run() -> None:
    for rule in rules():
        name = rule["alert"]
        assert re.fullmatch(r"Sparkctl[A-Z]\w+", name), name
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), name
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        assert re.search(r"`sparkctl [a-z]", notes["description"]), name


def test_the_tests_bite(promtool: str, tmp_path: Path) -> None:
    """The frozen-progress rule without its guard (realtime_tokens_total rising is
    progress) fires during one long generation, and the tests say so."""
    text = RULES.read_text()
    guard = re.search(
        r"\n\s*unless on \(cluster, group, instance\)\n[^\n]*realtime_tokens[^\n]*", text
    )
    assert guard is not None
    (tmp_path / "tests").mkdir()
    (tmp_path / "sparkctl-rules.yml").write_text(text.replace(guard[0], ""))
    serving = yaml.safe_load((PROM / "tests" / "serving.yml").read_text())
    serving["rule_files"] = ["../sparkctl-rules.yml"]  # the mutated copy beside it
    (tmp_path / "tests" / "serving.yml").write_text(yaml.safe_dump(serving, width=1000))
    proc = run([promtool, "test", "rules", "tests/serving.yml"], cwd=tmp_path)
    assert proc.returncode != 0
    assert 'group="long"' in proc.stdout + proc.stderr


# ---------------------------------------------------------------- a site's own timings
# The monitoring role installs the rules through its filter monitoring_rules, with the
# inventory's monitoring_alert_for and monitoring_progress_window where it sets them.
MONITORING_CONFIG = load_file(
    "monitoring_config_filter",
    REPO / "ansible_collections/sparkctl/spark/plugins/filter/monitoring_config.py",
)
SUM = "(sum by (cluster, group, instance) "
TUNED_FOR = {"SparkctlProgressFrozen": "15s", "SparkctlRankDown": "30s"}


def test_untuned_the_rules_are_installed_as_they_are() -> None:
    text = RULES.read_text()
    assert MONITORING_CONFIG.monitoring_rules(text) == text
    assert MONITORING_CONFIG.monitoring_rules(text, {}, "") == text


def test_tuned_only_the_named_alerts_timings_change_comments_kept() -> None:
    text = RULES.read_text()
    tuned = MONITORING_CONFIG.monitoring_rules(text, TUNED_FOR, "1m")
    changed = [(a, b) for a, b in zip(text.splitlines(), tuned.splitlines(), strict=True) if a != b]
    assert [(a.strip(), b.strip()) for a, b in changed] == [
        ("for: 1m", "for: 30s"),  # SparkctlRankDown
        (
            SUM + "(increase(sglang:generation_tokens_total[2m])) > 0)",
            SUM + "(increase(sglang:generation_tokens_total[1m])) > 0)",
        ),
        (
            SUM + "(increase(sglang:realtime_tokens_total[2m])) > 0)",
            SUM + "(increase(sglang:realtime_tokens_total[1m])) > 0)",
        ),
        ("for: 1m", "for: 15s"),  # SparkctlProgressFrozen
    ]
    by_name = {r["alert"]: r for g in yaml.safe_load(tuned)["groups"] for r in g["rules"]}
    assert by_name["SparkctlRankDown"]["for"] == "30s"
    assert by_name["SparkctlProgressFrozen"]["for"] == "15s"


def _frozen_case(eval_time: str, firing: bool) -> dict[str, Any]:
    """serving.yml's frozen group: tokens stop at 10 m while 3 requests run."""
    labels = 'cluster="lab",group="g1",instance="spark1:30000"'
    return {
        "interval": "15s",
        "input_series": [
            {"series": f"sglang:num_running_reqs{{{labels}}}", "values": "3x80"},
            {"series": f"sglang:num_queue_reqs{{{labels}}}", "values": "0x80"},
            {"series": f"sglang:generation_tokens_total{{{labels}}}", "values": "0+40x40 1600x40"},
            {"series": f"sglang:realtime_tokens_total{{{labels}}}", "values": "0+45x40 1800x40"},
        ],
        "alert_rule_test": [
            {
                "eval_time": eval_time,
                "alertname": "SparkctlProgressFrozen",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "critical",
                            "cluster": "lab",
                            "group": "g1",
                            "instance": "spark1:30000",
                        },
                        "exp_annotations": {
                            "summary": "lab: group g1 has requests but makes no progress",
                            "description": "No token generated while 3 request(s) run or "
                            "wait at spark1:30000: a hung rank. Run `sparkctl status INVENTORY` "
                            "(it names the rank); `sparkctl serve watch` restarts the group.",
                        },
                    }
                ]
                if firing
                else [],
            }
        ],
    }


def test_tuned_rules_check_and_fire_as_soon_as_they_say(promtool: str, tmp_path: Path) -> None:
    """A one-minute window held 15 s fires at 11m30s, 90 s after the tokens stopped;
    the rules as shipped (2m, held 1m) do not fire then. promtool holds both."""
    tuned = MONITORING_CONFIG.monitoring_rules(RULES.read_text(), TUNED_FOR, "1m")
    (tmp_path / "tuned.yml").write_text(tuned)
    (tmp_path / "shipped.yml").write_text(RULES.read_text())
    proc = run([promtool, "check", "rules", "tuned.yml"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name, firing in (("tuned", True), ("shipped", False)):
        test = {
            "rule_files": [f"{name}.yml"],
            "evaluation_interval": "15s",
            "tests": [_frozen_case("11m30s", firing)],
        }
        (tmp_path / f"test-{name}.yml").write_text(yaml.safe_dump(test, width=1000))
        proc = run([promtool, "test", "rules", f"test-{name}.yml"], cwd=tmp_path)
        assert proc.returncode == 0, name + ": " + proc.stdout + proc.stderr


def test_timings_the_rules_cannot_take_are_refused() -> None:
    from ansible.errors import AnsibleFilterError  # noqa: PLC0415

    text = RULES.read_text()
    for alert_for, window in (
        ({"SparkctlRankDwn": "30s"}, ""),
        ({"SparkctlRankDown": "0s"}, ""),
        ({"SparkctlRankDown": "30 s"}, ""),
        ({"SparkctlRankDown": 30}, ""),
        (["SparkctlRankDown"], ""),
        ({}, "2m]) > 0 or vector(1"),
        ({}, "0m"),
    ):
        with pytest.raises(AnsibleFilterError):
            MONITORING_CONFIG.monitoring_rules(text, alert_for, window)


# ---------------------------------------------------------------- the dashboard
def panels() -> list[dict[str, Any]]:
    data = json.loads(DASHBOARD.read_text())
    out: list[dict[str, Any]] = []
    for panel in data["panels"]:
        out += panel.get("panels", []) if panel.get("type") == "row" else [panel]
    return out


def exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p.get("targets", [])]


def test_every_panel_has_a_query() -> None:
    assert panels()
    for panel in panels():
        targets = panel.get("targets") or []
        assert targets and all(t.get("expr", "").strip() for t in targets), panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]


def test_every_dashboard_query_parses(promtool: str, tmp_path: Path) -> None:
    recorded = []
    for i, query in enumerate(exprs()):
        expr = query
        for var, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        assert "$__" not in expr, expr
        recorded.append({"record": f"sparkctl_dashboard_query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    proc = run([promtool, "check", "rules", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(recorded)} rules found" in proc.stdout


_METRIC = re.compile(r"\b(sparkctl_[a-z0-9_]+|sglang:[a-z0-9_]+|node_[A-Za-z0-9_]+)")


def test_the_dashboard_shows_every_signal_a_rule_uses() -> None:
    shown = set(_METRIC.findall(" ".join(exprs())))
    used = {m for rule in rules() for m in _METRIC.findall(rule["expr"])}
    # MemTotal only scales MemAvailable in the rule; the panel shows MemAvailable in bytes
    assert used - shown - {"node_memory_MemTotal_bytes"} == set()


def _series(text: str, extra: dict[str, str]) -> list[dict[str, str]]:
    """promtool input series of an exposition, each sample held for the whole test."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in {**s.labels, **extra}.items())
            out.append({"series": f"{s.name}{{{labels}}}", "values": f"{s.value!r}x40"})
    return out


def test_every_dashboard_query_returns_series_from_what_sparkctl_writes(
    promtool: str, tmp_path: Path
) -> None:
    """Each panel's query, evaluated by promtool's rule engine over sparkctl's own
    textfile output (a real validate report's, the fabric of a real plan, status and
    watchdog figures) scraped from the controller, and node_exporter's and SGLang's
    series as their sources name them, returns series: the joins on cluster, node and
    device meet. The lab's Prometheus is where real exporters answer."""
    from sparkctl import metrics  # noqa: PLC0415
    from tests.unit import plans  # noqa: PLC0415
    from tests.unit.test_metrics import MEM, validate_report  # noqa: PLC0415

    report, _ = validate_report()
    plan = plans.plan(list(MEM))
    f = metrics.Figures()
    c = {"cluster": "dgx"}
    f.set("sparkctl_status_timestamp_seconds", 1.8e9, **c)
    f.set("sparkctl_watchdog_timestamp_seconds", 1.8e9, **c)
    f.set("sparkctl_status_probe_success", 1, **c, group="g1")
    f.set("sparkctl_status_probe_duration_seconds", 0.4, **c, group="g1")
    f.set("sparkctl_watchdog_restarts_total", 2, **c, group="g1")
    f.set("sparkctl_watchdog_gave_up", 0, **c, group="g1")
    f.set("sparkctl_serve_verify_ttft_seconds", 0.2, **c, group="g1")
    f.set("sparkctl_serve_verify_e2e_latency_seconds", 2.0, **c, group="g1")
    f.set("sparkctl_serve_verify_decode_tokens_per_second", 40.0, **c, group="g1")
    for node in MEM:
        f.set("sparkctl_status_rank_up", 1, **c, group="g1", node=node)
        f.set("sparkctl_status_gpu_thermal_slowdown", 0, **c, node=node)
    controller = {"instance": "ctl:9100", "job": "node"}
    series = []
    for registry in (
        metrics.validate_metrics(report, MEM),
        metrics.fabric_metrics("dgx", plan),
        f.registry(),
    ):
        path = metrics.write(registry, tmp_path, "out")
        series += _series(path.read_text(), controller)
    textfiles = "/var/lib/prometheus/node-exporter"
    series += [
        {
            "series": f'node_textfile_mtime_seconds{{file="{textfiles}/sparkctl-{n}-dgx.prom",'
            'instance="ctl:9100",job="node"}',
            "values": "0+15x40",
        }
        for n in ("validate", "fabric", "status", "watch")
    ]
    series.append(
        {"series": 'node_textfile_scrape_error{instance="ctl:9100",job="node"}', "values": "0x40"}
    )
    for i, node in enumerate(MEM):
        own = f'cluster="dgx",node="{node}",instance="10.0.0.1{i + 1}:9100",job="node"'
        series += [
            {"series": f"node_memory_MemAvailable_bytes{{{own}}}", "values": f"{MEM[node]}x40"},
            {"series": f"node_memory_MemTotal_bytes{{{own}}}", "values": f"{128 << 30}x40"},
        ]
        for twin in plan.node(node).roce_fabric.twins:
            dev = f'{own},device="{twin.netdev}"'
            series += [
                {"series": f"node_network_up{{{dev}}}", "values": "1x40"},
                {"series": f"node_network_mtu_bytes{{{dev}}}", "values": "9000x40"},
                {"series": f"node_network_carrier_changes_total{{{dev}}}", "values": "2x40"},
            ]
    head = 'cluster="dgx",group="g1",instance="10.0.0.11:30000",job="sglang",model_name="toy"'
    series += [
        {"series": f'sglang:num_running_reqs{{{head},tp_rank="0"}}', "values": "2x40"},
        {"series": f'sglang:num_queue_reqs{{{head},tp_rank="0"}}', "values": "1x40"},
        {
            "series": f'sglang:generation_tokens_total{{{head},is_streaming="true"}}',
            "values": "0+100x40",
        },
        {
            "series": f'sglang:realtime_tokens_total{{{head},tp_rank="0",mode="decode"}}',
            "values": "0+120x40",
        },
    ]
    alerts = []
    for i, query in enumerate(exprs()):
        expr = query.replace('"$cluster"', '".*"')
        for var, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        alerts.append({"alert": f"DashboardQuery{i}", "expr": f"count({expr}) > 0"})
    (tmp_path / "queries.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": alerts}]})
    )
    test = {
        "rule_files": ["queries.yml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": a["alert"],
                        "exp_alerts": [{"exp_labels": {}, "exp_annotations": {}}],
                    }
                    for a in alerts
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, width=1000))
    proc = run([promtool, "test", "rules", "test.yml"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
