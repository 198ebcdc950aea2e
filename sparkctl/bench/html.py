"""The bench's ``report.html``, in the style of validate's (its CSS, tables and inline SVG:
self-contained, no script, nothing fetched).

Plots: output tokens/s against concurrency (the baseline's beside it), TTFT and ITL
against concurrency, and each twin's utilisation over the run's time, level by level.
Tables: the levels (bench_serving's figures), the communication share, each node's
memory, GPU and twins per level, the nodes apart from their peers, the baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkctl.report.html import _CSS, _e, _table, figure_svg, new_figure
from sparkctl.units import human_bytes

_VERDICT_COLOUR = {
    "passed": "#1a7f37",
    "errors": "#cf222e",
    "regressed": "#cf222e",
    "failed": "#cf222e",  # --layouts: a layout or the restore failed
}


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _bytes(value: Any) -> str:
    return "-" if value is None else human_bytes(value)


def _plot_levels(
    title: str,
    ylabel: str,
    lines: Sequence[tuple[str, Sequence[int], Sequence[float], str]],
    *,
    log_y: bool = False,
    salt: str,
) -> str:
    """Lines against concurrency (log2 x), one marker a level."""
    fig = new_figure()
    try:
        ax = fig.add_subplot()
        xs_all: set[int] = set()
        for label, xs, ys, style in lines:
            ax.plot(xs, ys, style, marker="o", markersize=4, linewidth=1.4, label=label)
            xs_all.update(xs)
        ax.set_xscale("log", base=2)
        ticks = sorted(xs_all)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        if log_y:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrency (requests in flight, log2)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="best", fontsize=8, framealpha=0.9)
        return figure_svg(fig, f"bench-{salt}-", f"sparkctl-bench-{salt}")
    finally:
        fig.clear()


def _plot_twins(report: Mapping[str, Any]) -> str:
    """Each node's twins over time: utilisation of the line rate (bytes/s without one),
    the levels' starts marked."""
    share = report.get("twin_line_bytes_per_s") is not None
    fig = new_figure()
    try:
        ax = fig.add_subplot()
        top = 0.0
        colours: dict[str, str] = {}  # one colour a twin over every level
        for level in report["levels"]:
            for node, points in sorted(level["series"].items()):
                twins = sorted({t for p in points for t in p["twins"]})
                for twin in twins:
                    key = "twins" if share else "bytes_per_s"
                    xs = [p["t"] for p in points if p[key].get(twin) is not None]
                    ys = [
                        p[key][twin] * (100 if share else 1)
                        for p in points
                        if p[key].get(twin) is not None
                    ]
                    if not xs:
                        continue
                    name = f"{node} {twin}"
                    label = None if name in colours else name
                    colour = colours.setdefault(name, f"C{len(colours) % 10}")
                    ax.plot(
                        xs, ys, color=colour, linewidth=1.2, marker=".", markersize=3, label=label
                    )
                    top = max(top, *ys)
        for level in report["levels"]:
            ax.axvline(level["started_s"], color="#6e7781", linestyle=":", linewidth=1)
            ax.annotate(
                f"c={level['concurrency']}",
                (level["started_s"], 0.01),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color="#57606a",
                va="bottom",
            )
        ax.set_ylim(0, top * 1.15 if top > 0 else 1)
        ax.set_xlabel("seconds since the bench started")
        ax.set_ylabel("% of the twin's line rate" if share else "bytes/s (busier direction)")
        ax.set_title("fabric twins over time")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper right", fontsize=7, framealpha=0.9, ncol=4)
        return figure_svg(fig, "bench-twins-", "sparkctl-bench-twins")
    finally:
        fig.clear()


def _levels_table(levels: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for x in levels:
        f = x["figures"]
        rows.append(
            [
                str(x["concurrency"]),
                f"{f['completed']}/{f['requests']}",
                str(f["errors"]),
                f"{f['output_tokens_per_s']:.1f}",
                f"{f['requests_per_s']:.2f}",
                f"{f['ttft_ms']['p50']:.0f}",
                f"{f['ttft_ms']['p99']:.0f}",
                f"{f['itl_ms']['p50']:.1f}",
                f"{f['itl_ms']['p99']:.1f}",
                f"{f['tpot_ms']['p50']:.1f}",
                f"{f['e2e_ms']['p50']:.0f}",
                f"{f['e2e_ms']['p99']:.0f}",
            ]
        )
    return _table(
        [
            "concurrency",
            "completed",
            "errors",
            "output tok/s",
            "req/s",
            "TTFT p50 (ms)",
            "TTFT p99",
            "ITL p50 (ms)",
            "ITL p99",
            "TPOT p50 (ms)",
            "E2E p50 (ms)",
            "E2E p99",
        ],
        rows,
        numeric=range(12),
    )


def _comm_table(levels: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            str(x["concurrency"]),
            _e(group),
            f"{c['batch']:g}",
            _e(human_bytes(c["message_bytes"])),
            str(c["allreduces_per_token"]),
            f"{c['allreduce_us']:.0f}",
            f"{c['comm_ms_per_token']:.2f}",
            f"{c['ms_per_token']:.2f}",
            _pct(c["share"]),
        ]
        for x in levels
        for group, c in sorted(x["comm"].items())
    ]
    if not rows:
        return '<p class="muted">Not computed (see the notes).</p>'
    return _table(
        [
            "concurrency",
            "group",
            "batch",
            "all-reduce",
            "per token",
            "us each",
            "comm ms/token",
            "TPOT p50 ms",
            "share",
        ],
        rows,
        numeric=(0, 2, 4, 5, 6, 7, 8),
    )


def _nodes_table(levels: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for x in levels:
        for node, n in sorted(x["nodes"].items()):
            twins = "; ".join(
                f"{t}: {_pct(v['utilisation'])} "
                f"({human_bytes(max(v['rx_bytes_per_s'], v['tx_bytes_per_s']))}/s, {v['source']})"
                for t, v in sorted(n["twins"].items())
            )
            rows.append(
                [
                    str(x["concurrency"]),
                    _e(node),
                    _bytes(n["mem_available_min_bytes"]),
                    _bytes(n["server_memory_max_bytes"]),
                    _num(n["gpu_util_pct"]),
                    _num(n["power_w"]),
                    _num(n["clock_sm_mhz"], "{:.0f}"),
                    _e(twins or "-"),
                ]
            )
    return _table(
        [
            "concurrency",
            "node",
            "MemAvailable (min)",
            "server cgroup (max)",
            "GPU util %",
            "power W",
            "SM clock MHz",
            "twins (busier direction)",
        ],
        rows,
        numeric=(0, 2, 3, 4, 5, 6),
    )


def _findings(levels: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            str(x["concurrency"]),
            _e(f["node"]),
            _e(f["subject"]),
            _e(f["message"]),
            f"{f['score']:.1f}",
            "yes" if i == 0 else "",
        ]
        for x in levels
        for i, f in enumerate(x["findings"])
    ]
    if not rows:
        return '<p class="muted">No node or link apart from its peers at any level.</p>'
    return _table(
        ["concurrency", "node", "what", "finding", "apart (x)", "pace-setter"], rows, numeric=(0, 4)
    )


def _baseline(b: Mapping[str, Any] | None) -> str:
    if not b:
        return '<p class="muted">No baseline given (--baseline PATH|last-good).</p>'
    rows = [
        [
            str(r["concurrency"]),
            f"{r['output_tokens_per_s']:.1f}",
            f"{r['baseline_output_tokens_per_s']:.1f}",
            _pct(r["change"]),
            f"{r['ttft_p50_ms']:.0f}",
            f"{r['baseline_ttft_p50_ms']:.0f}",
            "regressed" if r["regressed"] else "ok",
        ]
        for r in b["levels"]
    ]
    return (
        f'<p class="muted">Against {_e(b["run_id"])} ({_e(b["path"])}); tokens/s may drop by '
        f"{_pct(b['tolerance'])} at most.</p>"
        + _table(
            [
                "concurrency",
                "tok/s",
                "baseline tok/s",
                "change",
                "TTFT p50 ms",
                "baseline TTFT p50",
                "",
            ],
            rows,
            numeric=range(6),
        )
    )


def _meta(rows: Iterable[tuple[str, Any]]) -> str:
    return (
        '<table class="meta"><tbody>'
        + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)
        + "</tbody></table>"
    )


def _head(command: str, report: Mapping[str, Any]) -> list[str]:
    """The page's head, title and verdict, for ``command`` (``bench``, ``bench --layouts``)."""
    verdict = report["verdict"]
    return [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>sparkctl {command} {_e(report['cluster'])} {_e(report['run_id'])}: "
        f"{_e(verdict)}</title><style>{_CSS}</style></head><body>",
        f"<h1>sparkctl {command}: {_e(report['cluster'])}</h1>",
        f'<p><span class="verdict" style="background:{_VERDICT_COLOUR.get(verdict, "#6e7781")}">'
        f"{_e(verdict.upper())}</span></p>",
    ]


def _run_rows(report: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The run, as every bench report opens (run.report_head)."""
    return [
        ("cluster", report["cluster"]),
        ("run", report["run_id"]),
        ("started", report["started"]),
        ("duration", f"{report['duration_s']:.1f} s"),
    ]


def _workload(wl: Mapping[str, Any]) -> tuple[str, str]:
    return (
        "workload",
        f"{wl['input_words']} words in, {wl['output_len']} tokens out, seed {wl['seed']}, "
        f"concurrency {', '.join(map(str, wl['concurrency']))}",
    )


def render(report: Mapping[str, Any]) -> str:
    levels = report["levels"]
    conc = [x["concurrency"] for x in levels]
    base = report.get("baseline")
    tps_lines: list[tuple[str, Sequence[int], Sequence[float], str]] = [
        ("this run", conc, [x["figures"]["output_tokens_per_s"] for x in levels], "-")
    ]
    if base and base["levels"]:
        tps_lines.append(
            (
                f"baseline {base['run_id']}",
                [r["concurrency"] for r in base["levels"]],
                [r["baseline_output_tokens_per_s"] for r in base["levels"]],
                "--",
            )
        )
    lat_lines: list[tuple[str, Sequence[int], Sequence[float], str]] = [
        ("TTFT p50", conc, [max(x["figures"]["ttft_ms"]["p50"], 1e-3) for x in levels], "-"),
        ("TTFT p99", conc, [max(x["figures"]["ttft_ms"]["p99"], 1e-3) for x in levels], "--"),
        ("ITL p50", conc, [max(x["figures"]["itl_ms"]["p50"], 1e-3) for x in levels], "-."),
    ]
    model = report.get("model") or {}
    meta = [
        *_run_rows(report),
        ("endpoint", f"{report['endpoint']['url']} ({report['endpoint']['via']})"),
        ("model", report["endpoint"]["model"]),
        ("groups", "; ".join(f"{g}: {', '.join(m)}" for g, m in report["groups"].items())),
        (
            "shape",
            f"{model.get('architecture')}: hidden {model.get('hidden')}, "
            f"{model.get('layers')} layers, {model.get('dtype')}"
            if model
            else "not known",
        ),
        _workload(report["workload"]),
        ("latency curve", report.get("latency_run") or "none (no validate last-good)"),
        ("sparkctl", report["sparkctl_version"]),
    ]
    parts = [
        *_head("bench", report),
        _meta(meta),
        "<h2>Throughput and latency</h2>",
        _plot_levels("output tokens/s", "tokens/s", tps_lines, salt="tps"),
        _plot_levels("latency", "ms (log)", lat_lines, log_y=True, salt="lat"),
        _levels_table(levels),
        "<h2>Communication share of a token</h2>",
        '<p class="muted">Two all-reduces a layer of hidden x batch x element bytes, each '
        "timed on validate's measured all_reduce curve, against the measured time per "
        "output token (TPOT p50).</p>",
        _comm_table(levels),
        "<h2>Fabric twins</h2>",
        _plot_twins(report),
        "<h2>Nodes</h2>",
        _nodes_table(levels),
        "<h2>Pace-setter</h2>",
        _findings(levels),
        "<h2>Baseline</h2>",
        _baseline(base),
        "<h2>Notes</h2>",
        "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in report["notes"]) + "</ul>"
        if report["notes"]
        else '<p class="muted">None.</p>',
        f'<p class="muted">report.json schema {_e(report["schema"])} (docs/bench.md)</p>',
        "</body></html>\n",
    ]
    return "\n".join(parts)


_LAYOUT_STYLES = ("-", "--", "-.", ":")


def _layouts_table(layouts: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for lay in layouts:
        plan = lay.get("plan") or {}
        per_rank = _bytes(plan.get("weight_bytes_per_rank"))
        if lay.get("skipped") or not lay.get("levels"):
            rows.append(
                [lay["name"], lay.get("members", ""), per_rank]
                + ["-"] * 7
                + [lay.get("skipped") or "not run"]
            )
            continue
        for x in lay["levels"]:
            rows.append(
                [
                    lay["name"],
                    lay.get("members", ""),
                    per_rank,
                    str(x["concurrency"]),
                    f"{x['output_tokens_per_s']:.1f}",
                    f"{x['requests_per_s']:.2f}",
                    f"{x['ttft_ms']['p50']:.0f} / {x['ttft_ms']['p99']:.0f}",
                    f"{x['itl_ms']['p50']:.1f}",
                    f"{x['e2e_ms']['p50']:.0f}",
                    _pct(x["comm_share"]),
                    f"{x['errors']} errors" if x["errors"] else (x["pace_setter"] or ""),
                ]
            )
    return _table(
        [
            "layout",
            "groups",
            "weights a rank",
            "concurrency",
            "output tok/s",
            "req/s",
            "TTFT p50 / p99 (ms)",
            "ITL p50 (ms)",
            "E2E p50 (ms)",
            "comm share",
            "errors, pace-setter or why not run",
        ],
        rows,
        numeric=range(3, 10),
    )


def render_layouts(report: Mapping[str, Any]) -> str:
    """``bench --layouts``' report: every layout's levels side by side."""
    ran = [x for x in report["layouts"] if x.get("levels")]
    tps: list[tuple[str, Sequence[int], Sequence[float], str]] = []
    ttft: list[tuple[str, Sequence[int], Sequence[float], str]] = []
    for i, lay in enumerate(ran):
        conc = [x["concurrency"] for x in lay["levels"]]
        style = _LAYOUT_STYLES[i % len(_LAYOUT_STYLES)]
        tps.append((lay["name"], conc, [x["output_tokens_per_s"] for x in lay["levels"]], style))
        ttft.append(
            (
                f"{lay['name']} TTFT p50",
                conc,
                [max(x["ttft_ms"]["p50"], 1e-3) for x in lay["levels"]],
                style,
            )
        )
    before = report["before"]
    restored = report["restored"]
    meta = [
        *_run_rows(report),
        (
            "serving before",
            f"{before['layout']} ({before['groups']})"
            + ("" if before["serving"] else ", not serving"),
        ),
        (
            "restored",
            f"{restored['layout']} in {restored['seconds']:.0f} s"
            if restored["ok"]
            else f"FAILED: {restored.get('message', '')}",
        ),
        _workload(report["workload"]),
        ("model plan's advice", report["model"]["advice"]),
        ("sparkctl", report["sparkctl_version"]),
    ]
    reports = [
        f"<li>{_e(x['name'])}: {_e(x['report'])} (switched in {x['switch_s']:.0f} s)</li>"
        for x in ran
    ]
    parts = [
        *_head("bench --layouts", report),
        _meta(meta),
        "<h2>The layouts side by side</h2>",
        _plot_levels("output tokens/s by layout", "tokens/s", tps, salt="layouts-tps")
        if tps
        else '<p class="muted">No layout ran.</p>',
        _plot_levels("TTFT p50 by layout", "ms (log)", ttft, log_y=True, salt="layouts-ttft")
        if ttft
        else "",
        _layouts_table(report["layouts"]),
        "<h2>Each layout's own report</h2>",
        '<p class="muted">Nodes, twins, the communication share and the pace-setter per level.</p>',
        "<ul>" + "".join(reports) + "</ul>" if reports else '<p class="muted">None.</p>',
        f"<p>{_e(report['error'])}</p>" if report.get("error") else "",
        f'<p class="muted">report.json schema {_e(report["schema"])} (docs/bench.md)</p>',
        "</body></html>\n",
    ]
    return "\n".join(parts)
