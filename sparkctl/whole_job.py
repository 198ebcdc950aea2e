"""`sparkctl up`: the whole job, provision -> validate -> serve up -> serve verify.

It composes the commands, so it sits above them: no command package imports
another's, and this module is the one place that runs them in sequence. It
prints nothing: each step's result goes to ``show`` (the CLI's presentation) as
soon as the step ends, and a failed step's error stops the job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl import console, inventory
from sparkctl.errors import SparkctlError
from sparkctl.lock import inventory_lock

if TYPE_CHECKING:
    from sparkctl.playbook import PlaybookRun
    from sparkctl.report.model import Report
    from sparkctl.serve.service import Verified
    from sparkctl.serve.up import UpResult


@dataclass(frozen=True)
class Validated:
    """validate's report and the directory it was written to (a step of the whole job)."""

    report: Report
    run_dir: Path


@dataclass(frozen=True)
class WholeJob:
    """Every step's result, in order."""

    provisioned: PlaybookRun
    validated: Validated
    served: UpResult
    verified: Verified


def whole_job(
    inv: inventory.Inventory,
    extravars: Mapping[str, Any] | None = None,
    show: Callable[[object], None] = lambda _result: None,
) -> WholeJob:
    """provision -> validate (stop on failure) -> serve up -> serve verify.

    ``inv`` is validated once, by the caller, and handed to every step;
    ``extravars`` (-e) reach provision and the plan of validate alike."""
    # One lock for the whole job: no other run slips in between its steps.
    with inventory_lock(inv, "up"):
        return _whole_job(inv, extravars, show)


def _whole_job(
    inv: inventory.Inventory,
    extravars: Mapping[str, Any] | None,
    show: Callable[[object], None],
) -> WholeJob:
    from sparkctl import playbook  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415
    from sparkctl.serve.service import verify_command  # noqa: PLC0415
    from sparkctl.validate import run  # noqa: PLC0415

    console.progress("up 1/4: provision")
    provisioned = playbook.run(inv, extravars=extravars)
    _done(provisioned, show, provisioned.failure())
    # A running service keeps the configuration it started with: start it again when
    # provision changed anything on the nodes (unit, environment, model, network).
    changed = sorted(h for h, st in provisioned.run.stats.items() if st.changed)
    console.progress("up 2/4: validate")
    report, run_dir = run.validate(run.Options(inventory=inv, extra=dict(extravars or {})))
    validated = Validated(report, run_dir)
    _done(
        validated,
        show,
        SparkctlError(
            run.failure_summary(report) + f" (report: {run_dir / 'report.html'}"
            "); not starting the service on a cluster that failed validation",
            run.exit_code(report),
        )
        if report.verdict != "passed"
        else None,
    )
    console.progress(
        "up 3/4: serve up"
        + (f" (restart: provision changed {', '.join(changed)})" if changed else "")
    )
    served = up.up(inv, restart=bool(changed), extravars=extravars)
    _done(served, show, served.failure())
    console.progress("up 4/4: serve verify")
    verified = verify_command(inv, extravars=extravars)
    _done(verified, show, verified.failure())
    return WholeJob(provisioned, validated, served, verified)


def _done(result: object, show: Callable[[object], None], error: SparkctlError | None) -> None:
    show(result)
    if error is not None:
        raise error


@dataclass(frozen=True)
class AroundService:
    """``validate --stop-serving``: the report, and what happened to the service around it
    (``stopped``: the nodes whose rank ran and was stopped; ``served``: the start after
    the sweep, None when nothing had been stopped)."""

    report: Report
    run_dir: Path
    stopped: tuple[str, ...]
    served: UpResult | None


def validate_stopping_service(
    inv: inventory.Inventory, extravars: Mapping[str, Any] | None = None, **options: Any
) -> AroundService:
    """Stop a running TP service, validate, start it again (even when validate fails).

    A loaded model takes most of a GB10's unified memory, and nccl-tests' sweep is sized
    from what is left: next to a model the gate cannot reach the sizes it is calibrated
    at, and says "not judged". Every rank stops together and starts together, as a
    multi-node TP group must (one restarted rank cannot rejoin a running group). A
    service that was not running is left stopped. ``options`` go to validate's Options."""
    from sparkctl.serve import up  # noqa: PLC0415
    from sparkctl.serve.cluster import open_cluster  # noqa: PLC0415
    from sparkctl.validate import run  # noqa: PLC0415

    with inventory_lock(inv, "validate --stop-serving"):
        states = open_cluster(inv, "serve-status").unit_states()
        running = tuple(
            n for n, st in states.items() if st.get("ActiveState") in ("active", "activating")
        )
        if running:
            console.progress(
                f"validate --stop-serving: stopping the service on {len(states)} nodes"
            )
            stopped = up.down(inv)
            if (error := stopped.failure()) is not None:
                # A leftover that would not stop, or memory not back: the sweep would
                # be sized from memory the service still holds. Start it again first.
                console.progress("validate --stop-serving: starting the service again")
                up.up(inv, extravars=extravars)
                raise error
        else:
            console.progress("validate --stop-serving: the service is not running; nothing to stop")
        try:
            report, run_dir = run.validate(
                run.Options(inventory=inv, extra=dict(extravars or {}), **options)
            )
        finally:
            served = None
            if running:
                console.progress("validate --stop-serving: starting the service again")
                served = up.up(inv, extravars=extravars)
    return AroundService(report, run_dir, running, served)
