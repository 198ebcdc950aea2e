"""`serve verify`: the checks against the running service, the report, the verdict."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkctl import console, inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.report import summary
from sparkctl.report.model import Report
from sparkctl.serve.cluster import open_cluster


def verify_command(
    inventory_path: Path, *, as_json: bool = False, extravars: Mapping[str, Any] | None = None
) -> Report:
    from sparkctl import report as report_io  # noqa: PLC0415
    from sparkctl.serve.verify import verify  # noqa: PLC0415

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    inv = inventory.validate(inventory_path)  # exit 2 before any host is contacted
    # serve up restarting the ranks under a running verify would fail it for nothing
    with inventory_lock(inv, "serve verify"):
        cluster = open_cluster(inv, "serve-verify", extravars)
        report = verify(cluster, stamp)
    report_io.write(report, cluster.run_dir)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        summary.show(report)
    console.progress(f"report: {cluster.run_dir / 'report.html'}")
    if report.verdict != "passed":
        bad = report.failed_checks()
        ranks = [f"{c.host} ({c.subject})" for c in bad if c.check == "rank_running"]
        what = (
            f"rank not running: {', '.join(ranks)}"
            if ranks
            else "; ".join(f"{c.check}: {c.message}" for c in bad[:3])
        )
        raise SparkctlError(
            f"serve verify failed: {what}",
            ExitCode.CHECKS_FAILED,
            hint=f"sparkctl serve status {inventory_path}; "
            f"sparkctl serve up {inventory_path} starts it again",
        )
    return report
