"""sparkctl's Prometheus textfile metrics from a real `sparkctl validate` of the lab
(docs/monitoring.md): with SPARKCTL_TEXTFILE_DIR set, validate leaves exactly its two
files there, whole; they parse; the verdict is the report's; the fabric file names every
node's twin netdevs with the MTU the nodes really carry; each node's memory is there.
The node checks only (--no-nccl): the bandwidth figures are covered by the unit tests on
real GB10 logs, and this module measures no bandwidth.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import SIM_INVENTORY, LabSession, sparkctl
from tests.labhost import ssh

pytestmark = pytest.mark.lab


def test_validate_writes_its_metrics_for_the_textfile_collector(
    lab: LabSession, provisioned: dict[str, object], tmp_path: Path
) -> None:
    env = {**os.environ, "SPARKCTL_TEXTFILE_DIR": str(tmp_path)}
    proc = sparkctl("validate", str(SIM_INVENTORY), "--no-nccl", "--json", env=env, timeout=900)
    report = json.loads(proc.stdout)
    assert "metrics not written" not in proc.stderr, proc.stderr
    cluster = report["cluster"]
    files = sorted(p.name for p in tmp_path.iterdir())
    # the temp files were renamed: nothing else is left beside the two .prom files
    assert files == [f"sparkctl-fabric-{cluster}.prom", f"sparkctl-validate-{cluster}.prom"]

    def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
        text = "".join(p.read_text() for p in tmp_path.iterdir())
        return {
            tuple(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == name
        }

    verdict = samples("sparkctl_validate_verdict")
    assert verdict[(("cluster", cluster), ("verdict", report["verdict"]))] == 1.0
    assert sum(verdict.values()) == 1.0
    failed = samples("sparkctl_validate_checks_failed")
    for host in report["hosts"]:
        want = sum(
            1
            for c in report["checks"]
            if c["host"] == host and c["outcome"] not in ("passed", "skipped")
        )
        assert failed[(("cluster", cluster), ("node", host))] == want, host
    memory = samples("sparkctl_validate_memory_available_bytes")
    assert {dict(k)["node"] for k in memory} == set(report["hosts"])
    assert all(v > 0 for v in memory.values())
    assert samples("sparkctl_validate_busbw_bytes_per_second") == {}  # --no-nccl

    mtu = samples("sparkctl_fabric_expected_mtu_bytes")
    for node in lab.inventory.nodes:
        mine = {dict(k)["device"]: v for k, v in mtu.items() if dict(k)["node"] == node.name}
        assert len(mine) == 2, (node.name, mine)
        for device, expected in mine.items():
            real = ssh(node.mgmt_ip, f"cat /sys/class/net/{device}/mtu").stdout.strip()
            assert float(real) == expected, (node.name, device)
