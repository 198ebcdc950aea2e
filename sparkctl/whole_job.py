"""`sparkctl up`: the whole job, provision -> validate -> serve up -> serve verify.

It composes the commands, so it sits above them: no command package imports
another's, and this module is the one place that runs them in sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkctl import console, inventory
from sparkctl.errors import SparkctlError
from sparkctl.lock import inventory_lock


def whole_job(inventory_path: Path, extravars: Mapping[str, Any] | None = None) -> None:
    """provision -> validate (stop on failure) -> serve up -> serve verify.

    ``extravars`` (-e) reach provision and the plan of validate alike."""
    inv = inventory.validate(inventory_path)
    # One lock for the whole job: no other run slips in between its steps.
    with inventory_lock(inv, "up"):
        _whole_job(inventory_path, extravars)


def _whole_job(inventory_path: Path, extravars: Mapping[str, Any] | None) -> None:
    from sparkctl.provision import provision  # noqa: PLC0415
    from sparkctl.report import summary  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415
    from sparkctl.serve.service import verify_command  # noqa: PLC0415
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
