"""The monitoring role's files, rendered by ``sparkctl render`` from the lab's inventories,
and its scrape configuration checked by the real ``promtool check config`` (Debian's
prometheus package, which scripts/bootstrap.sh installs).

Every expectation is computed from the inventory (sparkctl's own loader: the Sparks,
their management addresses and node_rank, each one's sglang_group, the [monitoring]
group) and the roles' defaults, never copied from the rendered output. sim.ini has one
TP group (one SGLang target), sim-two-groups.ini two (two targets, labels a and b).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Rendered
from tests.unit.pathload import load_file

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles" / "monitoring"
RULES = ROLE / "files" / "sparkctl-rules.yml"
CONFIG = "/etc/prometheus/prometheus.yml"
FILTERS = load_file(
    "monitoring_config", ROLE.parents[1] / "plugins" / "filter" / "monitoring_config.py"
)


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


DEFAULTS = _yaml(ROLE / "defaults" / "main.yml")
VARS = _yaml(ROLE / "vars" / "main.yml")
SGLANG_DEFAULTS = _yaml(
    ROOT
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "sglang"
    / "defaults"
    / "main.yml"
)
SGLANG_VARS = _yaml(
    ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles" / "sglang" / "vars" / "main.yml"
)


@pytest.fixture(params=["sim", "sim-two-groups"])
def rendered(request: pytest.FixtureRequest) -> Rendered:
    get: Callable[[str], Rendered] = request.getfixturevalue("rendered_inventory")
    return get(request.param)


def _groups(r: Rendered) -> dict[str, list[Any]]:
    """TP group -> its Sparks in node_rank order (the sglang role's grouping: a Spark
    without sglang_group is in the role's default group)."""
    default = SGLANG_DEFAULTS["sglang_group"]
    out: dict[str, list[Any]] = {}
    for node in sorted(r.inv.nodes, key=lambda n: n.rank):
        out.setdefault(str(r.inv.hostvars[node.name].get("sglang_group", default)), []).append(node)
    return out


def _servers(r: Rendered) -> list[str]:
    return list(r.inv.groups.get("monitoring", []))


def _config(r: Rendered, host: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(r.read(host, CONFIG))
    return data


def _args(r: Rendered, host: str, path: str) -> list[str]:
    """The words ExecStart=... $ARGS gets: ARGS as sh (and systemd's EnvironmentFile=,
    alike for single quotes) reads it, split at blanks as systemd splits $ARGS."""
    lines = [ln for ln in r.read(host, path).splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == 1 and lines[0].startswith("ARGS="), lines
    (value,) = shlex.split(lines[0].removeprefix("ARGS="))
    return value.split()


def _check_config(promtool: str, config: Path, rules: Path, tmp_path: Path) -> str:
    """``promtool check config`` of ``config`` with its rule file at ``rules`` (the
    rendered file names /etc/prometheus/..., which this machine need not have)."""
    data = yaml.safe_load(config.read_text())
    data["rule_files"] = [str(rules)]
    checked = tmp_path / "prometheus.yml"
    checked.write_text(yaml.safe_dump(data))
    proc = subprocess.run(
        [promtool, "check", "config", str(checked)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_lab_inventories_name_a_monitoring_host(rendered: Rendered) -> None:
    assert _servers(rendered) == ["spark1"]
    assert rendered.inv.hostvars["spark1"]["monitoring_enabled"] is True


def test_promtool_accepts_the_rendered_configuration_and_rules(
    rendered: Rendered, promtool: str, tmp_path: Path
) -> None:
    for host in _servers(rendered):
        rules = rendered.out / host / "etc" / "prometheus" / "sparkctl-rules.yml"
        # The role's file as it is: the lab inventories keep the rules' own timings
        # (monitoring_alert_for and monitoring_progress_window unset).
        hv = rendered.inv.hostvars[host]
        assert "monitoring_alert_for" not in hv and "monitoring_progress_window" not in hv
        assert rules.read_text() == RULES.read_text()
        out = _check_config(promtool, rendered.out / host / CONFIG.lstrip("/"), rules, tmp_path)
        assert "SUCCESS: 1 rule files found" in out, out


def test_every_sparks_exporter_is_scraped_with_its_cluster_and_node(rendered: Rendered) -> None:
    port = DEFAULTS["monitoring_node_exporter_port"]
    for host in _servers(rendered):
        jobs = {j["job_name"]: j for j in _config(rendered, host)["scrape_configs"]}
        assert jobs["node"]["honor_labels"] is True  # sparkctl's textfiles keep their node
        got = [(c["targets"], c["labels"]) for c in jobs["node"]["static_configs"]]
        want = [
            ([f"{n.mgmt_ip}:{port}"], {"cluster": rendered.inv.cluster, "node": n.name})
            for n in sorted(rendered.inv.nodes, key=lambda n: n.rank)
        ]
        assert got == want


def test_each_tp_groups_head_is_scraped_with_its_group(rendered: Rendered) -> None:
    port = SGLANG_DEFAULTS["sglang_port"]
    groups = _groups(rendered)
    for host in _servers(rendered):
        jobs = {j["job_name"]: j for j in _config(rendered, host)["scrape_configs"]}
        got = sorted(
            (c["targets"][0], c["labels"]["group"], c["labels"]["cluster"])
            for c in jobs["sglang"]["static_configs"]
        )
        want = sorted(
            (f"{members[0].mgmt_ip}:{port}", group, rendered.inv.cluster)
            for group, members in groups.items()
        )
        assert got == want
        assert len({g for _, g, _ in got}) == len(groups)


def test_two_groups_give_two_sglang_targets(
    rendered_inventory: Callable[[str], Rendered],
) -> None:
    two = rendered_inventory("sim-two-groups")
    jobs = {j["job_name"]: j for j in _config(two, "spark1")["scrape_configs"]}
    labels = [c["labels"]["group"] for c in jobs["sglang"]["static_configs"]]
    assert sorted(labels) == ["a", "b"]
    # its gateway (sim-two-groups.ini, [sparks:vars]) on the first head's metrics port
    assert jobs["gateway"]["static_configs"] == [
        {
            "targets": [f"{two.inv.node('spark1').mgmt_ip}:29000"],
            "labels": {"cluster": two.inv.cluster},
        }
    ]
    one = {j["job_name"] for j in _config(rendered_inventory("sim"), "spark1")["scrape_configs"]}
    assert "gateway" not in one


def test_every_spark_runs_the_exporter_with_the_textfile_directory(rendered: Rendered) -> None:
    port = DEFAULTS["monitoring_node_exporter_port"]
    textfiles = DEFAULTS["monitoring_textfile_dir"]
    for node in rendered.inv.nodes:
        assert _args(rendered, node.name, "/etc/default/prometheus-node-exporter") == [
            f"--web.listen-address=:{port}",
            f"--collector.textfile.directory={textfiles}",
        ]
        # Prometheus itself only on the [monitoring] hosts
        has_server = (rendered.out / node.name / CONFIG.lstrip("/")).exists()
        assert has_server == (node.name in _servers(rendered))


def test_prometheus_runs_with_the_roles_port_retention_and_the_rendered_file(
    rendered: Rendered,
) -> None:
    for host in _servers(rendered):
        assert _args(rendered, host, "/etc/default/prometheus") == [
            f"--config.file={CONFIG}",
            f"--web.listen-address=:{DEFAULTS['monitoring_prometheus_port']}",
            f"--storage.tsdb.retention.time={DEFAULTS['monitoring_retention']}",
        ]


def test_the_sglang_fallbacks_are_the_sglang_roles_defaults() -> None:
    """Another host's sglang settings are read from hostvars (no role defaults there):
    the monitoring role's fallbacks must be the sglang role's defaults."""
    assert VARS["_monitoring_sglang_default_group"] == SGLANG_DEFAULTS["sglang_group"]
    assert VARS["_monitoring_sglang_default_group"] == SGLANG_VARS["_sglang_default_group"]
    port = SGLANG_DEFAULTS["sglang_port"]
    assert f"'sglang_port': hostvars[h].sglang_port | default({port})" in VARS["_monitoring_nodes"]
    gateway_port = SGLANG_DEFAULTS["sglang_gateway_metrics_port"]
    assert f"sglang_gateway_metrics_port | default({gateway_port})" in VARS["_monitoring_gateway"]
    assert "sglang_gateway_enabled | default(false)" in VARS["_monitoring_gateway"]
    assert SGLANG_DEFAULTS["sglang_gateway_enabled"] is False
    metrics = str(SGLANG_DEFAULTS["sglang_enable_metrics"]).lower()
    assert VARS["_monitoring_sglang_metrics"] == (
        f"{{{{ sglang_enable_metrics | default({metrics}) }}}}"
    )


# ------------------------------------------------------------ the filter itself
NODES = [
    {"name": "spark2", "address": "10.0.0.12", "node_rank": 1, "group": "g", "sglang_port": 1},
    {"name": "spark1", "address": "10.0.0.11", "node_rank": 0, "group": "g", "sglang_port": 31000},
]


def _build(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "node_exporter_port": 9100,
        "scrape_interval": "15s",
        "evaluation_interval": "15s",
        "rule_files": ["/etc/prometheus/sparkctl-rules.yml"],
    } | kw
    data: dict[str, Any] = FILTERS.monitoring_prometheus_config(NODES, "c", **args)
    return data


@pytest.mark.parametrize(
    ("interval", "timeout"), [("5s", "5s"), ("10s", "10s"), ("1m", "10s"), ("1500ms", "1500ms")]
)
def test_the_scrape_timeout_never_exceeds_the_interval(
    interval: str, timeout: str, promtool: str, tmp_path: Path
) -> None:
    data = _build(scrape_interval=interval)
    assert data["global"]["scrape_timeout"] == timeout
    config = tmp_path / "in.yml"
    config.write_text(yaml.safe_dump(data))
    rules = tmp_path / "rules.yml"
    shutil.copy(RULES, rules)
    _check_config(promtool, config, rules, tmp_path)


def test_the_head_is_the_lowest_rank_on_its_own_port_and_more_exporters_carry_no_node() -> None:
    data = _build(
        servers=[{"name": "mon", "address": "10.0.0.9"}],
        textfile_exporters=["controller:9100"],
    )
    node, sglang = data["scrape_configs"]
    assert sglang["static_configs"] == [
        {"targets": ["10.0.0.11:31000"], "labels": {"cluster": "c", "group": "g"}}
    ]
    assert node["static_configs"][-1] == {
        "targets": ["10.0.0.9:9100", "controller:9100"],
        "labels": {"cluster": "c"},
    }
    assert [c["labels"].get("node") for c in node["static_configs"][:2]] == ["spark1", "spark2"]


def test_without_sglang_metrics_there_is_no_sglang_job() -> None:
    jobs = [j["job_name"] for j in _build(sglang_metrics=False)["scrape_configs"]]
    assert jobs == ["node"]


@pytest.mark.parametrize(
    "kw",
    [
        {"scrape_interval": "0s"},
        {"scrape_interval": "15"},
        {"evaluation_interval": "1.5m"},
        {"node_exporter_port": 0},
        {"textfile_exporters": ["controller"]},
        {"textfile_exporters": ["a b:9100"]},
        {"rule_files": ["rules.yml"]},
    ],
)
def test_a_value_the_config_cannot_hold_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"monitoring_|rule file|is not"):
        _build(**kw)


def test_a_node_name_that_would_break_a_label_is_refused() -> None:
    bad = [{"name": "spark1\nx", "address": "10.0.0.11", "node_rank": 0, "group": "g"}]
    with pytest.raises(Exception, match="is not a plain name"):
        FILTERS.monitoring_prometheus_config(
            bad,
            "c",
            node_exporter_port=9100,
            scrape_interval="15s",
            evaluation_interval="15s",
            rule_files=[],
        )
