"""``soak.html``: a burn-in for people, in the style of ``report.html``.

Self-contained like the validate report (its CSS, tables and inline-SVG helpers
from :mod:`sparkctl.report.html`): the verdict and its reasons, then the figures
over time, one plot per series (busbw at the largest size per collective; each
node's temperature, power and SM clock), then the rounds as a table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.report.html import _CSS, _e, _outcome, _table, figure_svg, new_figure
from sparkctl.report.numbers import gbs, human_size, pct
from sparkctl.report.soak import SOAK_HTML, SOAK_JSON, NodeReading, Round, Soak

# (figure id, what it shows, unit, how a node's reading gives it)
NODE_SERIES: tuple[tuple[str, str, str, str], ...] = (
    ("temperature", "GPU temperature", "°C", "temperature_c"),
    ("power", "GPU power draw", "W", "power_w"),
    ("clock", "SM clock", "MHz", "clock_sm_mhz"),
)
_VERDICT_COLOUR = {"stable": "#1a7f37", "unstable": "#cf222e"}


def _minutes(x: Round) -> float:
    return x.ended_s / 60


def _series_plot(
    name: str,
    ylabel: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    lines: Sequence[tuple[float, str]] = (),
) -> str:
    """One line per label over the soak's minutes (each point a round's end); inline SVG."""
    fig = new_figure()
    try:
        ax = fig.add_subplot()
        top = 0.0
        for label, points in series.items():
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            ax.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.2, label=label)
            top = max(top, *ys)
        for value, label in lines:
            ax.axhline(value, color="#cf222e", linestyle=":", linewidth=1.4, label=label)
            top = max(top, value)
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
        ax.set_xlabel("minutes since the soak started (end of each round)")
        ax.set_ylabel(ylabel)
        ax.set_title(name)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
        return figure_svg(fig, f"soak-{name.replace(' ', '-')}-", f"sparkctl-soak-{name}")
    finally:
        fig.clear()


def _figure(fig_id: str, svg: str, caption: str) -> str:
    return f'<figure id="soak-{_e(fig_id)}">{svg}<figcaption>{_e(caption)}</figcaption></figure>'


def busbw_series(soak: Soak) -> dict[str, list[tuple[float, float]]]:
    """Per collective: (minutes, busbw at the largest size every round swept)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for name, size in soak.verdict.size.items():
        if size is None:
            continue
        points = [
            (_minutes(x), run.busbw[size])
            for x in soak.rounds
            if (run := x.run(name)) and size in run.busbw
        ]
        if points:
            out[f"{name} at {human_size(size)}"] = points
    return out


def node_series(soak: Soak, attr: str) -> dict[str, list[tuple[float, float]]]:
    """Per node: (minutes, the reading ``attr``) where nvidia-smi reported it."""
    out: dict[str, list[tuple[float, float]]] = {}
    for x in soak.rounds:
        for r in x.nodes:
            value = getattr(r, attr)
            if value is not None:
                out.setdefault(r.node, []).append((_minutes(x), float(value)))
    return out


def _plots(soak: Soak) -> list[str]:
    out = []
    th = soak.thresholds
    busbw = busbw_series(soak)
    if busbw:
        gates = sorted(
            {
                (t, f"threshold {gbs(t)} GB/s ({name})")
                for name in soak.verdict.size
                if (t := th.threshold_for(name)) is not None and th.line_rate_gbytes
            }
        )
        out.append(
            _figure(
                "busbw",
                _series_plot("busbw", "busbw (GB/s)", busbw, gates),
                "busbw per round at the largest size every round swept (the lower of "
                "out-of-place and in-place, the gate's figure), with the gate's threshold",
            )
        )
    else:
        out.append('<p class="muted">No NCCL rows in any round: no busbw to plot.</p>')
    for fig_id, what, unit, attr in NODE_SERIES:
        series = node_series(soak, attr)
        if series:
            out.append(
                _figure(
                    fig_id,
                    _series_plot(fig_id, f"{what} ({unit})", series),
                    f"{what} per node after each round's sweep, as nvidia-smi reported it",
                )
            )
        else:
            out.append(f'<p class="muted">{_e(what)}: not reported by nvidia-smi.</p>')
    return out


def _node_cell(r: NodeReading | None) -> str:
    if r is None:
        return ""
    parts = [
        f"{v:.0f} {unit}"
        for v, unit in (
            (r.temperature_c, "°C"),
            (r.power_w, "W"),
            (r.clock_sm_mhz, "MHz"),
        )
        if v is not None
    ]
    if r.clock_event_reasons is not None:
        parts.append(f"{r.clock_event_reasons:#x}")
    return _e(", ".join(parts) or r.note)


def _rounds_table(soak: Soak) -> str:
    collectives = list(soak.verdict.size)
    head = [
        "round",
        "ended (min)",
        "duration (s)",
        *(f"{_e(c)} busbw (GB/s)" for c in collectives),
        "#wrong",
        "failed checks",
        *(_e(h) for h in soak.hosts),
    ]
    rows = []
    for x in soak.rounds:
        cells = [_e(x.index), _e(f"{_minutes(x):.1f}"), _e(f"{x.duration_s:.0f}")]
        for name in collectives:
            run, size = x.run(name), soak.verdict.size[name]
            cells.append(
                f"{_e(gbs(run.busbw[size]))} {_outcome(run.outcome)}"
                if run and size is not None and size in run.busbw
                else ""
            )
        cells.append(_e(sum(r.wrong for r in x.nccl)))
        cells.append(
            _e(", ".join(f"{c.host} {c.check}" for c in x.failed_checks[:6]))
            + (f" +{len(x.failed_checks) - 6}" if len(x.failed_checks) > 6 else "")
        )
        by_node = {r.node: r for r in x.nodes}
        cells += [_node_cell(by_node.get(h)) for h in soak.hosts]
        rows.append(cells)
    return _table(head, rows, numeric=range(1, 3 + len(collectives) + 1))


def render_soak(soak: Soak) -> str:
    """``soak.html``: one self-contained page (inline CSS and SVG, no script, no URL)."""
    v = soak.verdict
    title = f"sparkctl validate --soak {soak.cluster} {soak.run_id}: {v.outcome}"
    meta: list[tuple[str, Any]] = [
        ("cluster", soak.cluster),
        ("run", soak.run_id),
        ("started", soak.started),
        ("asked for", f"{soak.requested_s:.0f} s"),
        ("ran", f"{soak.duration_s:.0f} s, {len(soak.rounds)} rounds"),
        ("hosts", ", ".join(soak.hosts)),
        ("inventory", soak.inventory),
        ("sparkctl", soak.sparkctl_version),
    ]
    spread = [
        [
            _e(name),
            _e(human_size(s) if (s := v.size.get(name)) else "n/a"),
            _e(gbs(m) if (m := v.median.get(name)) is not None else "n/a"),
            _e(pct(c) if (c := v.cv.get(name)) is not None else "n/a (one round)"),
        ]
        for name in v.size
    ]
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>sparkctl validate --soak: {_e(soak.cluster)}</h1>",
        f'<p><span class="verdict" style="background:{_VERDICT_COLOUR[v.outcome]}">'
        f"{_e(v.outcome.upper())}</span></p>",
        '<table class="meta"><tbody>',
        *(f"<tr><td>{_e(k)}</td><td>{_e(val)}</td></tr>" for k, val in meta),
        "</tbody></table>",
        "<h2>Verdict</h2>",
        (
            _table(
                ["kind", "round", "node / collective", "why"],
                (
                    [
                        _e(p.kind),
                        _e(p.round if p.round is not None else "all"),
                        _e(p.subject),
                        _e(p.message),
                    ]
                    for p in v.problems
                ),
            )
            if v.problems
            else '<p class="muted">No drop, no error, no throttling, busbw steady.</p>'
        ),
        _table(
            ["collective", "largest size (all rounds)", "median busbw (GB/s)", "variation"],
            spread,
            numeric=(2, 3),
        ),
        f'<p class="muted">tolerances: a drop is more than {_e(pct(v.tolerances["drop"]))} '
        f"under the median; variation (coefficient of variation) at most "
        f"{_e(pct(v.tolerances['cv_max']))}; a clock more than "
        f"{_e(pct(v.tolerances['clock']))} under the node's first round is throttling</p>"
        if v.tolerances
        else "",
        "<h2>Over time</h2>",
        *_plots(soak),
        "<h2>Rounds</h2>",
        _rounds_table(soak),
        '<p class="muted">each round\'s full report: <code>round-NNN/report.json</code></p>',
        "<h2>Notes</h2>",
    ]
    notes = [*v.notes, *soak.notes]
    parts.append(
        "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"
        if notes
        else '<p class="muted">None.</p>'
    )
    parts.append(f'<p class="muted">soak.json schema {_e(soak.schema)}</p></body></html>\n')
    return "\n".join(parts)


def write(soak: Soak, run_dir: Path) -> tuple[Path, Path]:
    """``soak.json`` and then ``soak.html`` into ``run_dir``; their paths."""
    from sparkctl.report.io import _atomic_write  # noqa: PLC0415 -- the one atomic writer

    json_path, html_path = run_dir / SOAK_JSON, run_dir / SOAK_HTML
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(json_path, json.dumps(soak.to_dict(), indent=2) + "\n")
        _atomic_write(html_path, render_soak(soak))
    except OSError as e:
        raise SparkctlError(
            f"cannot write the soak report into {run_dir}: {e.strerror or e}",
            ExitCode.ENVIRONMENT,
        ) from e
    return json_path, html_path
