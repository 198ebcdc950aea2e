"""`serve verify`: the checks against the running service, the report, the verdict."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkctl import inventory, metrics
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.report.model import Report
from sparkctl.serve.cluster import Cluster, open_cluster


@dataclass(frozen=True)
class Verified:
    """A serve verify run: its report (written to ``run_dir``), for the CLI to show."""

    report: Report
    run_dir: Path
    inventory_path: Path

    def to_dict(self) -> dict[str, Any]:
        return self.report.to_dict()

    def failure(self) -> SparkctlError | None:
        """One line naming what failed (the ranks not running and the firewalls gone
        first), or None."""
        if self.report.verdict == "passed":
            return None
        bad = self.report.failed_checks()
        ranks = [f"{c.host} ({c.subject})" for c in bad if c.check == "rank_running"]
        # a rank's firewall gone is named whatever else failed: the API is open
        named = ([f"rank not running: {', '.join(ranks)}"] if ranks else []) + [
            f"firewall: {c.message}" for c in bad if c.check == "firewall"
        ]
        what = "; ".join(named or [f"{c.check}: {c.message}" for c in bad[:3]])
        return SparkctlError(
            f"serve verify failed: {what}",
            ExitCode.CHECKS_FAILED,
            hint=f"sparkctl serve status {self.inventory_path}; "
            f"sparkctl serve up {self.inventory_path} starts it again",
        )


def verify_command(
    inv: inventory.Inventory, *, extravars: Mapping[str, Any] | None = None
) -> Verified:
    from sparkctl import report as report_io  # noqa: PLC0415
    from sparkctl.serve.verify import verify  # noqa: PLC0415

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # serve up restarting the ranks under a running verify would fail it for nothing
    with inventory_lock(inv, "serve verify"):
        cluster = open_cluster(inv, "serve-verify", extravars)
        report = verify(cluster, stamp)
        if report.verdict == "passed":  # the model each node serves has served through it
            _record_models(cluster)
    report_io.write(report, cluster.run_dir)
    # Prometheus textfile metrics where SPARKCTL_TEXTFILE_DIR is set (docs/monitoring.md)
    metrics.publish_serve_verify(report, {g.name: g.members for g in cluster.groups()})
    return Verified(report, cluster.run_dir, inv.path)


def _record_models(cluster: Cluster) -> None:
    """Each node's serving model revision (where its link points) as verified, for
    `model prune` (sparkctl.model_store)."""
    import shlex  # noqa: PLC0415

    from sparkctl import model_store  # noqa: PLC0415

    links = {n: cluster.plan.node(n).sglang.model_path for n in cluster.nodes}
    out = cluster.each_own({n: f"readlink -f {shlex.quote(link)}" for n, link in links.items()}, 30)
    roots = {n: text.strip() for n, (rc, text) in out.items() if rc == 0 and text.strip()}
    model_store.record_verified(cluster.inv.cluster, roots, "serve verify")
