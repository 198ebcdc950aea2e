"""The serve commands that combine steps: `serve verify` and `sparkctl up`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkctl import console, inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.serve.cluster import open_cluster
from sparkctl.validate import summary
from sparkctl.validate.report.model import Report


def verify_command(
    inventory_path: Path, *, as_json: bool = False, extravars: Mapping[str, Any] | None = None
) -> Report:
    from sparkctl.serve.verify import verify  # noqa: PLC0415
    from sparkctl.validate import report as report_io  # noqa: PLC0415

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


def whole_job(inventory_path: Path, extravars: Mapping[str, Any] | None = None) -> None:
    """provision -> validate (stop on failure) -> serve up -> serve verify.

    ``extravars`` (-e) reach provision and the plan of validate alike."""
    inv = inventory.validate(inventory_path)
    # One lock for the whole job: no other run slips in between its steps.
    with inventory_lock(inv, "up"):
        _whole_job(inventory_path, extravars)


def _whole_job(inventory_path: Path, extravars: Mapping[str, Any] | None) -> None:
    from sparkctl.provision import provision  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415
    from sparkctl.validate import run  # noqa: PLC0415

    console.progress("up 1/4: provision")
    provisioned = provision(inventory_path, extravars=extravars)
    # A running service keeps the configuration it started with: start it again when
    # provision changed anything on the nodes (unit, environment, model, network).
    changed = sorted(h for h, st in provisioned.stats.items() if st.changed)
    console.progress("up 2/4: validate")
    report, run_dir = run.validate(
        run.Options(inventory=inventory_path, extra=dict(extravars or {}))
    )
    summary.show(report)
    if report.verdict != "passed":
        raise SparkctlError(
            run.failure_summary(report) + f" (report: {run_dir / 'report.html'}"
            "); not starting the service on a cluster that failed validation",
            run.exit_code(report),
        )
    console.progress(
        "up 3/4: serve up"
        + (f" (restart: provision changed {', '.join(changed)})" if changed else "")
    )
    up.up(inventory_path, restart=bool(changed), extravars=extravars)
    console.progress("up 4/4: serve verify")
    verify_command(inventory_path, extravars=extravars)
