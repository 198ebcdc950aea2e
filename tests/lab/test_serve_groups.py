"""Two independent TP groups on the lab's four Sparks (inventory/sim-two-groups.ini).

spark1+spark2 form group a, spark3+spark4 group b: each group has its own
head, rendezvous and endpoint, TP=2 over two nodes. provision renders the
units from that inventory; serve up starts both; serve verify checks both
endpoints. The lab is provisioned back to one group of four afterwards.

The two inventories differ only in ``sglang_group`` (diff inventory/sim.ini
inventory/sim-two-groups.ini), which of the roles sglang reads (units, ranks,
rendezvous, firewall) and monitoring (one SGLang scrape target per group head,
labelled with its group); model_cache puts this module's model in every node's
cache. So the switch both ways is ``provision -t model_cache -t sglang -t
monitoring``, as an operator would regroup a provisioned cluster: the other
roles' state is the session's first provision's, and running them again would
change nothing (the idempotency test in test_provision.py shows that).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO, SIM_INVENTORY, LabSession, sparkctl
from tests.lab.test_monitoring import SGLANG_PORT, api, targets, wait_for
from tests.labhost import ssh

pytestmark = pytest.mark.lab

TWO = REPO / "inventory" / "sim-two-groups.ini"
MODEL_DIR = "/srv/sparkctl-model/groups"
CACHE = "/var/lib/sparkctl/models"
SOURCE = ["-e", "model_cache_source=head", "-e", f"model_cache_head_dir={MODEL_DIR}"]
# the model, and the roles that read groups
REGROUP = ["-t", "model_cache", "-t", "sglang", "-t", "monitoring"]


@pytest.fixture(scope="module")
def two_groups(lab: LabSession, provisioned: dict[str, object]) -> Iterator[None]:
    sparkctl("lab", "model", "--size", "16MiB", "--files", "2", "--dir", MODEL_DIR, check=True)
    proc = sparkctl("provision", str(TWO), *SOURCE, *REGROUP, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    yield
    sparkctl("serve", "down", str(TWO))
    for node in lab.inventory.nodes:
        ssh(node.mgmt_ip, f"rm -rf {CACHE} /srv/sparkctl-model", check=False)
    # one group of four again, for whatever runs next
    back = sparkctl("provision", str(SIM_INVENTORY), *REGROUP, timeout=1800)
    assert back.returncode == 0, back.stderr[-4000:]


def test_each_group_runs_its_own_rendezvous(lab: LabSession, two_groups: None) -> None:
    for name, head_ip in (("spark2", "192.168.100.11"), ("spark4", "192.168.100.13")):
        line = ssh(
            lab.inventory.node(name).mgmt_ip,
            "systemctl show -p ExecStart --value sparkctl-sglang.service",
        ).stdout
        assert "--tp-size 2 --nnodes 2 --node-rank 1" in line, line
        assert f"--dist-init-addr {head_ip}:" in line, line


def test_both_groups_serve_and_verify(two_groups: None) -> None:
    up = sparkctl("serve", "up", str(TWO), "--restart", timeout=900)
    assert up.returncode == 0, up.stderr[-4000:]
    assert "10.77.0.11:30000/v1" in up.stdout and "10.77.0.13:30000/v1" in up.stdout
    proc = sparkctl("serve", "verify", str(TWO), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    info = {c["host"]: c["message"] for c in report["checks"] if c["check"] == "server_info"}
    assert set(info) == {"spark1", "spark3"}
    assert all(m.startswith("tp_size 2, nnodes 2") for m in info.values()), info
    ranks = {(c["host"], c["subject"]) for c in report["checks"] if c["check"] == "rank_running"}
    assert ranks == {
        ("spark1", "rank 0"),
        ("spark2", "rank 1"),
        ("spark3", "rank 0"),
        ("spark4", "rank 1"),
    }
    # Each group's endpoint answers a one-token generation (the last validate's verdict,
    # which other modules' faults may have left failed, is not this test's concern).
    status = json.loads(sparkctl("status", str(TWO), "--json").stdout)
    assert [(g["group"], g["head"], g["probe_ok"]) for g in status["groups"]] == [
        ("a", "spark1", True),
        ("b", "spark3", True),
    ], status["problems"]
    assert not [p for p in status["problems"] if "rank" in p or "group" in p], status["problems"]


def test_the_lab_prometheus_scrapes_each_groups_head_with_its_group(
    lab: LabSession, two_groups: None
) -> None:
    """Regrouped by provision's monitoring role: one SGLang target per group head
    (spark1 for a, spark3 for b), labelled with its group, both up while both serve
    (after test_both_groups_serve_and_verify)."""
    port = SGLANG_PORT
    want = {
        "a": f"{lab.inventory.node('spark1').mgmt_ip}:{port}",
        "b": f"{lab.inventory.node('spark3').mgmt_ip}:{port}",
    }

    def heads() -> dict[str, str]:
        sglang = [t for t in targets(lab) if t["labels"]["job"] == "sglang"]
        got = {t["labels"]["group"]: t["labels"]["instance"] for t in sglang}
        assert got == want, got
        return got if all(t["health"] == "up" for t in sglang) else {}

    wait_for("both heads scraped up", heads)

    # A target turns up before its scrape's samples are committed (Prometheus sets the
    # health in report(), ahead of the appender's Commit, scrape/scrape.go), and SGLang's
    # scheduler gauges have no series until its first log_stats (metrics_collector.py:1286):
    # each group's series comes within a scrape or two of its head being up.
    def groups() -> set[str]:
        query = 'sum by (group) (sglang:num_running_reqs{job="sglang"})'
        result = api(lab, "/api/v1/query", query=query)
        got = {s["metric"]["group"] for s in result["result"]}
        assert got <= {"a", "b"}, got
        return got if got == {"a", "b"} else set()

    wait_for("a num_running_reqs series for each group", groups)


def test_a_stopped_rank_is_named_with_its_group(lab: LabSession, two_groups: None) -> None:
    ssh(lab.inventory.node("spark4").mgmt_ip, "systemctl stop sparkctl-sglang.service")
    proc = sparkctl("serve", "verify", str(TWO), "--json", timeout=600)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    failed = {(c["check"], c["host"]) for c in report["checks"] if c["outcome"] == "failed"}
    assert ("rank_running", "spark4") in failed
    # group a does not depend on group b: it still answers
    healthy = {
        c["host"] for c in report["checks"] if c["check"] == "health" and c["outcome"] == "passed"
    }
    assert healthy == {"spark1"}
