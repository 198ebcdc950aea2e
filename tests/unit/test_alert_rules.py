"""monitoring/: the alert rules pass `promtool check rules` and their unit tests
(`promtool test rules`, Debian's prometheus package); every rule has a firing and a
not-firing case, a `for`, a severity and annotations naming what to run; the tests bite
(a rule without its long-generation guard fails them); and every query of the Grafana
dashboard parses as PromQL (each wrapped in a recording rule for promtool, which has no
expression check of its own in 2.42) and the dashboard shows every signal a rule uses.

promtool missing: the test fails under CI and is skipped on a workstation."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROM = REPO / "monitoring" / "prometheus"
RULES = PROM / "sparkctl-rules.yml"
TESTS = sorted((PROM / "tests").glob("*.yml"))
DASHBOARD = REPO / "monitoring" / "grafana" / "sparkctl.json"
# Grafana's own variables, given values a query can be parsed with (a $variable inside a
# label matcher's string is only a string to PromQL).
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: apt-get install prometheus (scripts/bootstrap.sh)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return found


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [r for group in data["groups"] for r in group["rules"]]


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
    shutil.copy(PROM / "tests" / "serving.yml", tmp_path / "tests" / "serving.yml")
    proc = run([promtool, "test", "rules", "tests/serving.yml"], cwd=tmp_path)
    assert proc.returncode != 0
    assert 'group="long"' in proc.stdout + proc.stderr


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
