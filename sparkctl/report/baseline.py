"""Comparison with a baseline: this run's busbw per size against the last good run's."""

from __future__ import annotations

import math

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.report.model import Baseline, BaselineItem, NcclRun, Outcome, Report
from sparkctl.report.numbers import gbs, human_size, pct

# A drop of exactly the tolerance passes; this absorbs float noise in (current - base) / base.
_EPSILON = 1e-9


def _all_runs(report: Report, collective: str) -> list[NcclRun]:
    return [r for r in report.nccl if r.scope == "all" and r.collective == collective]


def _compare_run(
    run: NcclRun,
    baseline: Report,
    tolerance: float,
    *,
    items: list[BaselineItem],
    skipped: list[str],
    failures: list[str],
) -> None:
    """Compare one all-node run's judged sizes; append to ``items``, ``skipped``, ``failures``."""
    name = run.collective
    if run.outcome == "error":
        skipped.append(f"{name} (this run's measurement errored)")
        return
    candidates = [b for b in _all_runs(baseline, name) if b.outcome != "error"]
    if not candidates:
        why = "errored there" if _all_runs(baseline, name) else "not in the baseline"
        skipped.append(f"{name} ({why})")
        return
    base = candidates[0].busbw_by_size()
    mine = run.busbw_by_size()
    for judged in run.judged:
        size = judged.size
        if size not in base:
            skipped.append(f"{name} at {human_size(size)} (not in the baseline's sizes)")
            continue
        before, now = base[size], mine.get(size, judged.busbw)
        if before <= 0:
            skipped.append(f"{name} at {human_size(size)} (baseline busbw is 0)")
            continue
        change = (now - before) / before
        outcome: Outcome = "failed" if change < -tolerance - _EPSILON else "passed"
        items.append(BaselineItem(name, size, before, now, change, outcome))
        if outcome == "failed":
            failures.append(
                f"{name} at {human_size(size)}: {gbs(now)} GB/s is "
                f"{pct(-change)} below the baseline's {gbs(before)} GB/s "
                f"(run {baseline.run_id})"
            )


def compare(current: Report, baseline: Report, baseline_path: str, tolerance: float) -> Baseline:
    """Compare the judged sizes of ``current``'s all-node runs with ``baseline``'s.

    An item fails when busbw dropped by more than ``tolerance`` (a fraction:
    0.1 is 10%). A collective or size the baseline does not have is skipped
    and said so in the message, never failed; so is a run that errored.
    """
    if not math.isfinite(tolerance) or tolerance < 0:
        raise SparkctlError(
            f"baseline tolerance {tolerance!r} must be a fraction >= 0 (0.1 is 10%)",
            ExitCode.BAD_INPUT,
        )
    items: list[BaselineItem] = []
    skipped: list[str] = []
    failures: list[str] = []
    runs = [r for r in current.nccl if r.scope == "all" and r.judged]
    for run in runs:
        _compare_run(run, baseline, tolerance, items=items, skipped=skipped, failures=failures)
    notes = []
    if skipped:
        notes.append("not compared: " + "; ".join(skipped))
    if baseline.cluster != current.cluster:
        notes.append(
            f"the baseline is of cluster {baseline.cluster!r}, this run of {current.cluster!r}"
        )
    tail = "".join(f"; {n}" for n in notes)
    outcome: Outcome
    if failures:
        outcome = "failed"
        message = "; ".join(failures) + f" (tolerance {pct(tolerance)})" + tail
    elif items:
        outcome = "passed"
        collectives = len({i.collective for i in items})
        message = (
            f"{len(items)} size(s) of {collectives} collective(s) within "
            f"{pct(tolerance)} of run {baseline.run_id}"
        ) + tail
    else:
        outcome = "skipped"
        why = "; ".join(notes) if runs else "this run has no all-node NCCL run with judged sizes"
        message = f"nothing to compare with run {baseline.run_id}: {why}"
    return Baseline(
        path=baseline_path,
        run_id=baseline.run_id,
        tolerance=tolerance,
        items=items,
        outcome=outcome,
        message=message,
    )
