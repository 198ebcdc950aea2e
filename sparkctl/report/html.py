"""``report.html``: a validation run for people.

Self-contained (inline CSS and SVG, no JavaScript, nothing fetched), so it can
be mailed or attached to a ticket. matplotlib is imported only when a plot is
drawn: the CLI starts without it.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sparkctl.report.model import (
    OUTCOMES,
    Check,
    Fit,
    NcclRun,
    Report,
    Thresholds,
    latency_rows,
)
from sparkctl.report.numbers import gbs, human_size, pct, tick

_SEVERITY = {"passed": 0, "skipped": 1, "not_judged": 2, "failed": 3, "error": 4}
_COLOURS = {
    "passed": "#1a7f37",
    "skipped": "#6e7781",
    "not_judged": "#9a6700",
    "failed": "#cf222e",
    "error": "#8250df",
}

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;
max-width:75em;padding:0 1em;color:#1f2328;line-height:1.4}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict{display:inline-block;font-size:2em;font-weight:700;color:#fff;padding:.1em .6em;
border-radius:.2em;letter-spacing:.05em}
.o{font-weight:600;white-space:nowrap}.o-passed{color:#1a7f37}.o-skipped{color:#6e7781}
.o-failed{color:#cf222e}.o-error{color:#8250df}.o-not_judged{color:#9a6700}
td.cell-passed{background:#dafbe1}td.cell-skipped{background:#eaeef2}
td.cell-failed{background:#ffebe9}td.cell-error{background:#fbefff}td.cell-none{color:#8c959f}
.meta td:first-child{font-weight:600}.muted{color:#6e7781}code{font-size:.9em}
figure{margin:.8em 0}figcaption{color:#57606a;font-size:.9em}
svg{max-width:100%;height:auto}
@media print{details{display:block}details>summary{display:none}}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _outcome(outcome: str) -> str:
    return f'<span class="o o-{_e(outcome)}">{_e(outcome)}</span>'


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], numeric: Iterable[int] = ()) -> str:
    """A table of already-escaped cells; columns in ``numeric`` align right."""
    nums = set(numeric)
    out = ["<table><thead><tr>", *(f"<th>{h}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append(
            "<tr>"
            + "".join(
                f'<td class="num">{c}</td>' if i in nums else f"<td>{c}</td>"
                for i, c in enumerate(row)
            )
            + "</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _worst(checks: Iterable[Check]) -> str:
    return max((c.outcome for c in checks), key=lambda o: _SEVERITY.get(o, 4))


def _columns(report: Report) -> list[str]:
    """The report's hosts, then any other host a check names, then "cluster"."""
    seen = list(report.hosts)
    for c in report.checks:
        if c.host not in seen and c.host != "cluster":
            seen.append(c.host)
    if any(c.host == "cluster" for c in report.checks):
        seen.append("cluster")
    return seen


def _matrix(report: Report) -> str:
    if not report.checks:
        return '<p class="muted">No node checks in this run.</p>'
    names = list(dict.fromkeys(c.check for c in report.checks))
    hosts = _columns(report)
    cells: dict[tuple[str, str], list[Check]] = {}
    for c in report.checks:
        cells.setdefault((c.check, c.host), []).append(c)
    out = [
        '<table class="matrix"><thead><tr><th>check</th>',
        *(f"<th>{_e(h)}</th>" for h in hosts),
        "</tr></thead><tbody>",
    ]
    for name in names:
        out.append(f"<tr><th>{_e(name)}</th>")
        for host in hosts:
            group = cells.get((name, host))
            if not group:
                out.append('<td class="cell-none" title="not run on this host">&#8212;</td>')
                continue
            worst = _worst(group)
            bad = [c for c in group if not c.ok]
            shown = bad or [c for c in group if c.outcome == "skipped"] or group
            title = "\n".join(f"{c.subject or host}: {c.outcome}: {c.message}" for c in shown[:30])
            count = f" {len(group) - len(bad)}/{len(group)}" if len(group) > 1 else ""
            subjects = ", ".join(_e(c.subject) for c in bad if c.subject)
            detail = f"<br><small>{subjects}</small>" if subjects else ""
            out.append(
                f'<td class="cell-{_e(worst)}" title="{_e(title)}">'
                f"{_outcome(worst)}{_e(count)}{detail}</td>"
            )
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _check_list(checks: list[Check]) -> str:
    return _table(
        ["host", "check", "subject", "outcome", "message"],
        (
            [_e(c.host), _e(c.check), _e(c.subject or ""), _outcome(c.outcome), _e(c.message)]
            for c in checks
        ),
    )


def _rows(run: NcclRun) -> list[Mapping[str, Any]]:
    return sorted(run.report["rows"], key=lambda r: int(r["size"])) if run.report else []


def _svg_inline(svg: str, prefix: str) -> str:
    """matplotlib's SVG made fit for an HTML page that holds several of them.

    The XML prolog, DOCTYPE and namespace declarations go (HTML parses inline
    SVG without them, and they are the only URLs in the file); every id gets
    ``prefix`` so one plot's clip paths and markers cannot shadow another's.
    """
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}\1"', svg)
    svg = re.sub(r'(href=")#([^"]+)"', rf'\1#{prefix}\2"', svg)
    return re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}\1)", svg)


def _plot(collective: str, runs: list[NcclRun], th: Thresholds, index: int) -> str:
    """busbw against size for ``collective``: all-node runs bold, pairs faint; inline SVG."""
    from matplotlib.ticker import NullLocator  # noqa: PLC0415

    fig = new_figure()
    try:
        ax = fig.add_subplot()
        sizes: set[int] = set()
        top = th.line_rate_gbytes
        pair_labelled = False
        for run in sorted(runs, key=lambda r: r.scope != "pair"):  # all-node runs drawn last
            rows = _rows(run)
            if not rows:
                continue
            x = [int(r["size"]) for r in rows]
            oop = [float(r["out_of_place"]["busbw"]) for r in rows]
            inp = [float(r["in_place"]["busbw"]) for r in rows]
            sizes.update(x)
            top = max(top, *oop, *inp)
            if run.scope == "pair":
                ax.plot(
                    x,
                    [min(a, b) for a, b in zip(oop, inp, strict=True)],
                    color="#8c959f",
                    alpha=0.45,
                    linewidth=0.9,
                    label=None if pair_labelled else "node pairs (lower of the two)",
                )
                pair_labelled = True
                continue
            ax.plot(x, oop, marker="o", markersize=3.5, color="#0969da", label="out-of-place")
            ax.plot(
                x, inp, marker="s", markersize=3, color="#bf8700", linestyle="--", label="in-place"
            )
            judged = [j.size for j in run.judged]
            if judged:
                ax.axvspan(
                    min(judged) / 1.25,
                    max(judged) * 1.25,
                    color="#0969da",
                    alpha=0.07,
                    label="judged sizes",
                )
            top = max(top, _draw_fit(ax, run, x))
        _draw_limits(ax, collective, th)
        ax.set_xscale("log", base=2)
        if sizes:
            ordered = sorted(s for s in sizes if s > 0)
            step = max(1, math.ceil(len(ordered) / 10))
            ticks = ordered[::-1][::step][::-1]  # thinned from the largest, which is judged
            ax.set_xticks(ticks, [tick(t) for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
        ax.set_xlabel("message size (bytes, log2)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(collective)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
        return figure_svg(fig, f"p{index}-", f"sparkctl{index}")
    finally:
        fig.clear()


def new_figure() -> Any:
    """A matplotlib figure of the report's size, drawn without a display."""
    import matplotlib  # noqa: PLC0415 -- only when a report is drawn: keeps CLI start-up fast

    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # noqa: PLC0415

    return Figure(figsize=(8, 3.8), layout="constrained")


def figure_svg(fig: Any, prefix: str, salt: str) -> str:
    """``fig`` as inline SVG for a page of several plots (ids prefixed with ``prefix``),
    the same bytes for the same figure (no date; ``salt`` fixes matplotlib's ids)."""
    import matplotlib  # noqa: PLC0415

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(
            buf,
            format="svg",
            metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
        )
    return _svg_inline(buf.getvalue(), prefix)


def _draw_fit(ax: Any, run: NcclRun, sizes: list[int]) -> float:
    """The alpha-beta model of ``run`` over its sweep and its fitted busbw; the highest
    value drawn (0 when there is no fitted line)."""
    fit = run.fit
    if fit is None or fit.method != "fit" or min(sizes) <= 0:
        return 0.0
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    grid = [2 ** (lo + (hi - lo) * i / 60) for i in range(61)]
    ax.plot(
        grid,
        [fit.model_busbw(int(g)) for g in grid],
        color="#8250df",
        linewidth=1.2,
        label=f"alpha-beta fit ({fit.latency_us:.0f} us latency)",
    )
    ax.axhline(
        fit.busbw,
        color="#8250df",
        linestyle="--",
        linewidth=1,
        label=f"fitted busbw {gbs(fit.busbw)} GB/s",
    )
    return fit.busbw


def _draw_limits(ax: Any, collective: str, th: Thresholds) -> None:
    """Line rate, the collective's threshold and the floor under the largest size."""
    ax.axhline(
        th.line_rate_gbytes,
        color="#1f2328",
        linestyle="-.",
        linewidth=1,
        label=f"line rate {gbs(th.line_rate_gbytes)} GB/s",
    )
    threshold = th.threshold_for(collective)
    if threshold is not None:
        ax.axhline(
            threshold,
            color="#cf222e",
            linestyle=":",
            linewidth=1.4,
            label=f"threshold {gbs(threshold)} GB/s",
        )
    floor = th.floor_for(collective)
    if floor is not None:
        ax.axhline(
            floor,
            color="#cf222e",
            linestyle=":",
            linewidth=0.8,
            alpha=0.6,
            label=f"floor (largest size) {gbs(floor)} GB/s",
        )


def _half_cell(half: Mapping[str, Any]) -> list[str]:
    wrong = half.get("wrong")
    error = half.get("error")
    check = (
        "N/A"
        if wrong is None and error is None
        else (str(wrong) if wrong is not None else f"{error:g}")
    )
    return [
        _e(f"{float(half['time_us']):g}"),
        _e(gbs(float(half["algbw"]))),
        _e(gbs(float(half["busbw"]))),
        _e(check),
    ]


def _latency_section(report: Report) -> str:
    """all_reduce's time by size at decode's message sizes: a log-log plot and the rows."""
    rows = latency_rows(report)
    if len(rows) < 2:
        return (
            '<p class="muted">No all_reduce sizes up to 1 MiB in this run '
            "(validate_nccl_latency_min_bytes).</p>"
        )
    from matplotlib.ticker import NullLocator  # noqa: PLC0415

    fig = new_figure()
    try:
        ax = fig.add_subplot()
        x = [size for size, _, _ in rows]
        ax.plot(
            x,
            [o for _, o, _ in rows],
            marker="o",
            markersize=3.5,
            color="#0969da",
            label="out-of-place",
        )
        ax.plot(
            x,
            [i for _, _, i in rows],
            marker="s",
            markersize=3,
            color="#bf8700",
            linestyle="--",
            label="in-place",
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        step = max(1, math.ceil(len(x) / 10))
        ticks = x[::step]
        ax.set_xticks(ticks, [tick(t) for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("message size (bytes, log2)")
        ax.set_ylabel("time (us, log)")
        ax.set_title("all_reduce latency")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
        svg = figure_svg(fig, "lat-", "sparkctl-latency")
    finally:
        fig.clear()
    table = _table(
        ["size", "out-of-place (us)", "in-place (us)"],
        ([_e(human_size(size)), f"{o:g}", f"{i:g}"] for size, o, i in rows),
        numeric=(1, 2),
    )
    return (
        '<p class="muted">What one all-reduce costs at the sizes a TP group moves per decode '
        "step (a token's hidden state a request): time, not bandwidth, rules here.</p>"
        + svg
        + table
    )


def _nccl_section(report: Report) -> str:
    th = report.thresholds
    if not report.nccl:
        return '<p class="muted">No NCCL runs in this run.</p>'
    out: list[str] = []
    collectives = list(dict.fromkeys(r.collective for r in report.nccl))
    for index, name in enumerate(collectives):
        runs = [r for r in report.nccl if r.collective == name]
        alls = [r for r in runs if r.scope == "all"]
        pairs = [r for r in runs if r.scope == "pair"]
        out.append(f"<h3>{_e(name)}</h3>")
        threshold, fraction = th.threshold_for(name), th.fraction_for(name)
        gate = (
            f"threshold for the fitted busbw {gbs(threshold)} GB/s "
            f"({pct(fraction or 0.0)} of line rate)"
            if threshold is not None
            else "not gated on bandwidth (measured and reported)"
        )
        if any(_rows(r) for r in runs):
            out.append(
                f"<figure>{_plot(name, runs, th, index)}<figcaption>busbw of "
                f"{_e(name)} against message size, with the alpha-beta fit the gate "
                f"judges; line rate {_e(gbs(th.line_rate_gbytes))} GB/s, "
                f"{_e(gate)}</figcaption></figure>"
            )
        else:
            out.append('<p class="muted">No result rows to plot.</p>')
        for run in alls:
            out.append(
                f"<p>All nodes ({_e(', '.join(run.hosts))}): {_outcome(run.outcome)} "
                f"&#8212; {_e(run.message)}</p>"
            )
            if run.judged:
                # Each row against this collective's own threshold (the gate itself
                # judges the fit below); an ungated collective has none to compare.
                head = (
                    f"&#8805; threshold ({_e(gbs(threshold))} GB/s)"
                    if threshold is not None
                    else "threshold"
                )
                out.append(
                    _table(
                        ["size", "bytes", "busbw (GB/s)", "of line rate", "#wrong", head],
                        (
                            [
                                _e(human_size(j.size)),
                                _e(j.size),
                                _e(gbs(j.busbw)),
                                _e(pct(j.fraction)),
                                _e(j.wrong),
                                (
                                    "not gated"
                                    if threshold is None
                                    else "yes"
                                    if j.busbw >= threshold
                                    else "<b>no</b>"
                                ),
                            ]
                            for j in run.judged
                        ),
                        numeric=(1, 2, 3, 4),
                    )
                )
            if run.fit is not None:
                out.append(_fit_table(run, run.fit, th))
            if run.report:
                rep = run.report
                extra = [
                    f"avg busbw {gbs(float(rep.get('avg_busbw', 0.0)))} GB/s",
                    f"out-of-bounds values {rep.get('oob_values', 'n/a')}",
                    f"#wrong {rep.get('wrong', 'n/a')}",
                ]
                out.append(
                    f'<p class="muted">{_e("; ".join(extra))}'
                    + (f"; log <code>{_e(run.log)}</code>" if run.log else "")
                    + "</p>"
                )
                for err in rep.get("errors") or []:
                    out.append(f'<p class="o-failed"><code>{_e(err)}</code></p>')
                out.append(
                    "<details><summary>every row</summary>"
                    + _table(
                        [
                            "size",
                            "count",
                            "type",
                            "redop",
                            "time (us)",
                            "algbw",
                            "busbw",
                            "#wrong",
                            "in-place time (us)",
                            "algbw",
                            "busbw",
                            "#wrong",
                        ],
                        (
                            [
                                _e(human_size(int(r["size"]))),
                                _e(r.get("count", "")),
                                _e(r.get("type", "")),
                                _e(r.get("redop", "")),
                                *_half_cell(r["out_of_place"]),
                                *_half_cell(r["in_place"]),
                            ]
                            for r in _rows(run)
                        ),
                        numeric=range(4, 12),
                    )
                    + "</details>"
                )
        if pairs:

            def largest(run: NcclRun) -> str:
                by_size = run.busbw_by_size()
                if not by_size:
                    return ""
                size = max(by_size)
                return f"{gbs(by_size[size])} at {human_size(size)}"

            out.append(
                "<p>Node pairs (compared by their fitted busbw):</p>"
                + _table(
                    [
                        "pair",
                        "outcome",
                        "fitted busbw (GB/s)",
                        "busbw (GB/s) at the largest size",
                        "message",
                    ],
                    (
                        [
                            _e(" + ".join(r.hosts)),
                            _outcome(r.outcome),
                            _e(gbs(r.fit.busbw) if r.fit else ""),
                            _e(largest(r)),
                            _e(r.message),
                        ]
                        for r in pairs
                    ),
                    numeric=(2, 3),
                )
            )
    return "".join(out)


def _fit_table(run: NcclRun, fit: Fit, th: Thresholds) -> str:
    """The model the gate judged, beside the rows: bandwidth, latency, residual, floor."""
    threshold, floor = th.threshold_for(run.collective), th.floor_for(run.collective)
    how = (
        f"alpha-beta fit over {human_size(fit.sizes[0])} .. {human_size(fit.sizes[-1])} "
        f"({len(fit.sizes)} sizes), out-of-place and in-place"
        + ("; above the line rate: noisy rows or a wrong line rate" if fit.above_line_rate else "")
        if fit.method == "fit"
        else "as measured (one size, or times that do not grow with size: no fit)"
    )
    return _table(
        [
            "model",
            "fitted busbw ± standard error (GB/s)",
            "of line rate",
            "algbw (GB/s)",
            "latency (us)",
            "residual",
            "measured at the largest size (GB/s)",
            "threshold (GB/s)",
            "floor (GB/s)",
        ],
        [
            [
                _e(how),
                _e(gbs(fit.busbw) + (f" ± {fit.busbw_se:.3f}" if fit.method == "fit" else "")),
                _e(pct(fit.busbw / th.line_rate_gbytes) if th.line_rate_gbytes else "n/a"),
                _e(gbs(fit.algbw)),
                _e(f"{fit.latency_us:.0f}" + (" (held at 0)" if fit.latency_constrained else "")),
                _e(pct(fit.residual)),
                _e(f"{gbs(fit.largest_busbw)} at {human_size(fit.largest_size)}"),
                _e(gbs(threshold) if threshold is not None else "not gated"),
                _e(gbs(floor) if floor is not None else "none"),
            ]
        ],
        numeric=range(1, 9),
    )


def _baseline_section(report: Report) -> str:
    b = report.baseline
    if b is None:
        return '<p class="muted">No baseline comparison in this run.</p>'
    out = [
        f"<p>{_outcome(b.outcome)} against run <code>{_e(b.run_id)}</code> "
        f"(<code>{_e(b.path)}</code>), tolerance {_e(pct(b.tolerance))}: {_e(b.message)}</p>"
    ]
    if b.items:
        out.append(
            _table(
                [
                    "collective",
                    "size",
                    "baseline busbw (GB/s)",
                    "busbw (GB/s)",
                    "change",
                    "outcome",
                ],
                (
                    [
                        _e(i.collective),
                        _e(human_size(i.size)),
                        _e(gbs(i.baseline_busbw)),
                        _e(gbs(i.current_busbw)),
                        _e(f"{i.change * 100:+.1f}%"),
                        _outcome(i.outcome),
                    ]
                    for i in b.items
                ),
                numeric=(2, 3, 4),
            )
        )
    return "".join(out)


def render_html(report: Report) -> str:
    """``report.html``: one self-contained page (inline CSS and SVG, no script, no URL)."""
    verdict = report.verdict
    th = report.thresholds
    title = f"sparkctl validate {report.cluster} {report.run_id}: {verdict}"
    counts = {o: sum(1 for c in report.checks if c.outcome == o) for o in OUTCOMES}
    meta = [
        ("cluster", report.cluster),
        ("run", report.run_id),
        ("started", report.started),
        ("duration", f"{report.duration_s:.1f} s"),
        ("hosts", ", ".join(report.hosts)),
        ("inventory", report.inventory),
        ("sparkctl", report.sparkctl_version),
        ("checks", ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "none"),
    ]
    failures = report.failed_checks()
    skipped = [c for c in report.checks if c.outcome == "skipped"]
    nccl_bad = [r for r in report.nccl if r.outcome in ("failed", "error", "not_judged")]
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>sparkctl validate: {_e(report.cluster)}</h1>",
        f'<p><span class="verdict" style="background:{_COLOURS[verdict]}">'
        f"{_e(verdict.replace('_', ' ').upper())}</span></p>",
        '<table class="meta"><tbody>',
        *(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in meta),
        "</tbody></table>",
        "<h2>Thresholds</h2>",
        _table(
            [
                "line rate",
                "minimum fraction",
                "threshold (min busbw)",
                "judged sizes",
                "baseline tolerance",
            ],
            [
                [
                    _e(f"{gbs(th.line_rate_gbytes)} GB/s"),
                    _e(pct(th.min_fraction)),
                    _e(f"{gbs(th.min_busbw_gbytes)} GB/s"),
                    _e(f"the {th.judged_sizes} largest"),
                    _e(pct(th.baseline_tolerance)),
                ]
            ],
        ),
        "<h2>Node checks</h2>",
        _matrix(report),
        "<h2>Failures</h2>",
        _check_list(failures) if failures else '<p class="muted">No check failed.</p>',
    ]
    if nccl_bad:
        parts.append(
            _table(
                ["NCCL run", "outcome", "message"],
                ([_e(r.key), _outcome(r.outcome), _e(r.message)] for r in nccl_bad),
            )
        )
    if skipped:
        parts += ["<details><summary>Skipped checks</summary>", _check_list(skipped), "</details>"]
    parts += ["<h2>NCCL bandwidth</h2>", _nccl_section(report)]
    parts += ["<h2>All-reduce latency</h2>", _latency_section(report), "<h2>Localisation</h2>"]
    if report.localisation:
        parts.append(
            _table(
                ["host", "subject", "finding"],
                ([_e(f.host), _e(f.subject or ""), _e(f.message)] for f in report.localisation),
            )
        )
    else:
        parts.append('<p class="muted">No findings.</p>')
    parts += ["<h2>Baseline</h2>", _baseline_section(report), "<h2>Notes</h2>"]
    if report.notes:
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in report.notes) + "</ul>")
    else:
        parts.append('<p class="muted">None.</p>')
    parts.append(f'<p class="muted">report.json schema {_e(report.schema)}</p></body></html>\n')
    return "\n".join(parts)
