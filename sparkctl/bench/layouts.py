"""``sparkctl bench --layouts tp4,tp2x2,tp1x4``: the same workload on each TP layout the
model fits, side by side, then the layout that was serving again.

For each layout, in the order given:

1. ``model plan``'s figures (:mod:`sparkctl.model_plan`, the model as the head holds
   it): a layout the model does not fit is reported as skipped, with the figures;
2. the layout's inventory (:func:`sparkctl.layout.apply`: the operator's inventory and
   a second source with each Spark's ``sglang_group``), checked by every rule;
3. when its groups differ from what the Sparks run: ``provision -t sglang -t
   monitoring`` from it (the units, ranks, rendezvous, firewall, gateway, scrape
   targets), then ``serve up --restart``; every rank stops and starts together, as a
   multi-node TP group must;
4. the bench of :mod:`sparkctl.bench.run`, with the same options (it does not move
   ``bench-last-good``: that is the serving layout's).

Then the inventory's own layout is provisioned and served again (or stopped, when
nothing served before), also after a failure or Ctrl-C: a failed restore is the error
the command ends with, with the commands that finish it by hand.

The run holds the inventory's lock throughout: the watchdog (``serve watch``), which
knows the inventory's groups only, leaves the ranks alone while it is held, as it does
for any other sparkctl run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparkctl import console, layout, model_plan
from sparkctl.bench import run
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.inventory import Inventory
from sparkctl.lock import inventory_lock

KIND = "bench-layouts"


def _figures(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A row per level: what the side-by-side table and plots read."""
    rows = []
    for x in report["levels"]:
        f = x["figures"]
        shares = list(x["comm"].values())
        rows.append(
            {
                "concurrency": x["concurrency"],
                "requests": f["requests"],
                "errors": f["errors"],
                "output_tokens_per_s": f["output_tokens_per_s"],
                "requests_per_s": f["requests_per_s"],
                "ttft_ms": f["ttft_ms"],
                "itl_ms": f["itl_ms"],
                "e2e_ms": f["e2e_ms"],
                "comm_share": max((s["share"] for s in shares), default=None),
                "comm_ms": max((s["comm_ms_per_token"] for s in shares), default=None),
                "pace_setter": x["pace_setter"]["node"] if x["pace_setter"] else None,
            }
        )
    return rows


def _restore_hint(inv: Inventory, serving: bool) -> str:
    tags = " ".join(f"-t {t}" for t in layout.REGROUP_TAGS)
    then = f"serve up {inv.path} --restart" if serving else f"serve down {inv.path}"
    return f"sparkctl provision {inv.path} {tags}, then sparkctl {then}"


class _Deployer:
    """What the Sparks run, and the one way to change it (provision, then serve up)."""

    def __init__(self, inv: Inventory, extra: Mapping[str, Any]) -> None:
        self.extra = dict(extra)
        self.deployed = layout.partition_of(inv)  # the units on the Sparks
        self.original = self.deployed

    def serve(self, target: Inventory, *, serving_now: bool) -> float:
        """``target``'s groups provisioned when they are not the Sparks', then served;
        the seconds it took."""
        from sparkctl import playbook  # noqa: PLC0415
        from sparkctl.serve import up  # noqa: PLC0415

        began = time.monotonic()
        want = layout.partition_of(target)
        changed = want != self.deployed
        if changed:
            console.progress(
                f"bench --layouts: provisioning {layout.describe(target)} "
                f"(-t {' -t '.join(layout.REGROUP_TAGS)})"
            )
            done = playbook.run(
                target,
                tags=layout.REGROUP_TAGS,
                extravars=self.extra,
                command="bench-layout",
            )
            # units may be half written: from here the Sparks hold neither layout
            self.deployed = frozenset()
            if (error := done.failure()) is not None:
                raise error
            self.deployed = want
        if changed or not serving_now:
            served = up.up(target, restart=changed, extravars=self.extra)
            if (error := served.failure()) is not None:
                raise error
        return round(time.monotonic() - began, 1)


def bench_layouts(
    opts: run.Options,
    layouts: Sequence[layout.Layout],
    progress: Callable[[str], None] = console.progress,
) -> tuple[dict[str, Any], Path]:
    """Each layout served and benched in turn, the serving one restored; the combined
    report (written as report.json and report.html) and its directory."""
    from sparkctl.bench import html  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415
    from sparkctl.serve.cluster import open_cluster  # noqa: PLC0415

    inv = opts.inventory
    gpus = _gpus_per_node(inv)
    layout.refuse_extra(opts.extra)
    if opts.baseline:
        raise SparkctlError(
            "--baseline compares one layout's run; with --layouts, compare a layout's own "
            "report (its directory is in the layouts' report)",
            ExitCode.BAD_INPUT,
        )
    # every layout's inventory checked before any host is contacted
    targets = [layout.apply(inv, x, opts.extra, gpus) for x in layouts]
    began = time.monotonic()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with inventory_lock(inv, "bench --layouts"):
        cluster = open_cluster(inv, KIND, opts.extra)
        plan = model_plan.plan_cluster(cluster)
        now = up.serving_now(cluster)
        serving = now is not None and now.ok
        before = {
            "layout": plan.serving,
            "groups": layout.describe(inv),
            "serving": serving,
        }
        progress(
            f"bench --layouts: {layout.names(layouts)}; serving now: {plan.serving} "
            f"({before['groups']}){'' if serving else ', not serving'}"
        )
        deployer = _Deployer(inv, opts.extra)
        rows: list[dict[str, Any]] = []
        failure: SparkctlError | None = None
        live = serving
        try:
            for i, (spec, target) in enumerate(zip(layouts, targets, strict=True), 1):
                fit = plan.layout(spec.name)
                row: dict[str, Any] = {
                    "name": spec.name,
                    "tp": spec.tp,
                    "groups": spec.groups,
                    "members": layout.describe(target),
                    "plan": fit.to_dict(plan.model.shape) if fit else None,
                }
                if fit is not None and not fit.fit.fits:
                    row["skipped"] = "does not fit: " + "; ".join(fit.fit.problems)
                    progress(f"bench --layouts {i}/{len(layouts)} {spec.name}: {row['skipped']}")
                    rows.append(row)
                    continue
                progress(f"bench --layouts {i}/{len(layouts)} {spec.name}: {row['members']}")
                row["switch_s"] = deployer.serve(target, serving_now=live)
                live = True
                one, run_dir = run.bench(replace(opts, inventory=target, record_last_good=False))
                row |= {
                    "skipped": None,
                    "run_id": run_dir.name,
                    "report": str(run_dir / run.REPORT_JSON),
                    "endpoint": one["endpoint"],
                    "verdict": one["verdict"],
                    "levels": _figures(one),
                    "notes": one["notes"],
                }
                rows.append(row)
                progress(
                    f"bench --layouts {i}/{len(layouts)} {spec.name}: "
                    + "; ".join(
                        f"c={r['concurrency']} {r['output_tokens_per_s']:.1f} tok/s "
                        f"TTFT p50 {r['ttft_ms']['p50']:.0f} ms"
                        for r in row["levels"]
                    )
                )
        except (SparkctlError, KeyboardInterrupt) as exc:
            failure = (
                exc
                if isinstance(exc, SparkctlError)
                else SparkctlError("bench --layouts: interrupted", ExitCode.INTERRUPTED)
            )
        restored, restore_error = _restore(
            inv, deployer, serving=serving, live=live, progress=progress
        )
        report: dict[str, Any] = {
            **run.report_head(KIND, inv, cluster.run_dir, stamp, began),
            "before": before,
            "workload": run.workload_dict(opts),
            "model": {
                "advice": plan.advice,
                "weight_bytes": plan.model.weight_bytes,
            },
            "layouts": rows,
            "restored": restored,
            "error": failure.message if failure else None,
        }
        report["verdict"] = layouts_verdict(report)
        run_dir = cluster.run_dir
        (run_dir / run.REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n")
        (run_dir / run.REPORT_HTML).write_text(html.render_layouts(report))
    if restore_error is not None:
        raise restore_error
    if failure is not None:
        raise SparkctlError(
            f"{failure.message} (the layouts' report: {run_dir / run.REPORT_HTML}; "
            f"{plan.serving} restored)",
            failure.code,
            hint=failure.hint,
        )
    return report, run_dir


def _restore(
    inv: Inventory,
    deployer: _Deployer,
    *,
    serving: bool,
    live: bool,
    progress: Callable[[str], None],
) -> tuple[dict[str, Any], SparkctlError | None]:
    """The inventory's own layout as it was: provisioned back when the Sparks run
    another, served when it served (else stopped when a layout was started); what
    was done, and the error that ends the command when it could not be."""
    from sparkctl.serve import up  # noqa: PLC0415

    began = time.monotonic()
    out: dict[str, Any] = {"layout": layout.describe(inv), "ok": True, "seconds": 0.0}
    back = deployer.deployed != deployer.original
    if not back and live == serving:
        return out, None
    progress(f"bench --layouts: restoring {layout.describe(inv)}")
    error: SparkctlError | None = None
    try:
        if serving:
            deployer.serve(inv, serving_now=not back)
        else:
            if back:
                deployer.serve(inv, serving_now=True)
            stopped = up.down(inv)
            if (not_stopped := stopped.failure()) is not None:
                raise not_stopped
    except (SparkctlError, KeyboardInterrupt) as exc:
        message = exc.message if isinstance(exc, SparkctlError) else "interrupted"
        out |= {"ok": False, "message": message}
        error = SparkctlError(
            f"bench --layouts: restoring the inventory's layout failed: {message}",
            ExitCode.CHECKS_FAILED,
            hint=_restore_hint(inv, serving),
        )
    out["seconds"] = round(time.monotonic() - began, 1)
    return out, error


def layouts_verdict(report: Mapping[str, Any]) -> str:
    """``failed`` (a layout could not be served or benched, or the restore failed),
    ``errors`` (a request failed) or ``passed``."""
    if report.get("error") or not report["restored"]["ok"]:
        return "failed"
    if any(x.get("verdict") == "errors" for x in report["layouts"]):
        return "errors"
    return "passed"


def _gpus_per_node(inv: Inventory) -> int:
    value = inv.cluster_var("sglang_gpus_per_node", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def parse(inv: Inventory, text: str) -> list[layout.Layout]:
    """``--layouts``' value for this inventory's Sparks (exit 2 naming the bad word)."""
    return layout.parse(text, len(inv.nodes), _gpus_per_node(inv))


def failure(report: Mapping[str, Any], run_dir: Path) -> SparkctlError | None:
    if report["verdict"] == "errors":
        bad = [x["name"] for x in report["layouts"] if x.get("verdict") == "errors"]
        return SparkctlError(
            f"bench --layouts: requests failed on {', '.join(bad)} "
            f"(report: {run_dir / run.REPORT_HTML})",
            ExitCode.CHECKS_FAILED,
        )
    return None
