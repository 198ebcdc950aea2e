"""sparkctl.report: report.json round trip, report.html, load() refusals, baselines."""

from __future__ import annotations

import html as htmllib
import json
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.nccl_parse import Half, NcclReport, Row
from sparkctl.report.baseline import compare
from sparkctl.report.html import render_html
from sparkctl.report.io import load, write
from sparkctl.report.model import (
    Check,
    Finding,
    Judged,
    NcclRun,
    Report,
    Thresholds,
)
from sparkctl.report.numbers import gbs, human_size

HOSTS = ["spark1", "spark2", "spark3", "spark4"]
LINE_RATE = 25.0
THRESHOLDS = Thresholds(
    line_rate_gbytes=LINE_RATE, min_fraction=0.8, judged_sizes=2, baseline_tolerance=0.1
)
MiB = 1 << 20


def nccl_dict(
    collective: str, sizes: list[int], peak: float, *, scale: dict[int, float] | None = None
) -> dict[str, Any]:
    """NcclReport.to_dict() of a run whose busbw climbs towards ``peak`` with size."""
    rows = []
    for number, size in enumerate(sizes, start=30):
        busbw = round(peak * size / (size + 256 * 1024) * (scale or {}).get(size, 1.0), 2)
        time_us = round(size / max(busbw, 0.01) / 1000 * 1.5 + 20, 2)
        out = Half(time_us=time_us, algbw=round(busbw / 1.5, 2), busbw=busbw, wrong=0)
        inp = Half(
            time_us=time_us + 0.4,
            algbw=round(busbw / 1.5, 2),
            busbw=round(busbw * 1.004, 2),
            wrong=0,
        )
        rows.append(
            Row(
                size=size,
                count=size // 4,
                type="float",
                redop="sum",
                root=-1,
                out_of_place=out,
                in_place=inp,
                line=number,
            )
        )
    avg = round(sum(r.out_of_place.busbw for r in rows) / len(rows), 4)
    return NcclReport(f"{collective}_perf", "2.18.3", rows, avg, 0).to_dict()


def all_run(
    collective: str,
    sizes: list[int],
    peak: float = 22.5,
    *,
    scale: dict[int, float] | None = None,
    judged_n: int = 2,
    outcome: str = "passed",
) -> NcclRun:
    data = nccl_dict(collective, sizes, peak, scale=scale)
    rows = sorted(data["rows"], key=lambda r: r["size"])[-judged_n:]
    judged = [
        Judged(
            size=r["size"],
            busbw=min(r["out_of_place"]["busbw"], r["in_place"]["busbw"]),
            fraction=min(r["out_of_place"]["busbw"], r["in_place"]["busbw"]) / LINE_RATE,
            wrong=0,
        )
        for r in rows
    ]
    return NcclRun(
        collective=collective,
        scope="all",
        hosts=list(HOSTS),
        outcome=outcome,  # type: ignore[arg-type]
        message=f"busbw {judged[-1].busbw} GB/s at {human_size(judged[-1].size)}",
        command=["mpirun", "-np", "4", f"{collective}_perf", "-b", "8", "-e", "4M"],
        log=f"nccl-{collective}.log",
        report=data,
        judged=judged,
        duration_s=12.5,
    )


def pair_run(collective: str, a: str, b: str, sizes: list[int], peak: float) -> NcclRun:
    return NcclRun(
        collective=collective,
        scope="pair",
        hosts=[a, b],
        outcome="passed",
        message="pair ok",
        report=nccl_dict(collective, sizes, peak),
        log=f"nccl-{collective}-{a}-{b}.log",
        duration_s=3.0,
    )


SIZES = [8 << k for k in range(20)]  # 8 B .. 4 MiB: 20 rows, as the lab's short sweep
BIG = [MiB * (1 << k) for k in range(6)]  # 1 MiB .. 32 MiB


def make_report(
    run_id: str = "20261201T101500Z",
    *,
    nccl: list[NcclRun] | None = None,
    checks: list[Check] | None = None,
) -> Report:
    if checks is None:
        checks = [
            Check("twin_up", h, f"enp1s0f{i}np{i}", "passed", "up, 200000 Mb/s", 0.02)
            for h in HOSTS
            for i in (0, 1)
        ]
        checks += [Check("mesh_jumbo", h, None, "passed", "9000-byte pings ok", 0.4) for h in HOSTS]
        checks += [
            Check("gpu_visible", h, None, "skipped", "no GPU in the lab", 0.0) for h in HOSTS
        ]
        checks.append(Check("ranks_unique", "cluster", None, "passed", "ranks 0-3 once each"))
    return Report(
        run_id=run_id,
        cluster="dgx",
        inventory="inventory/prod.ini",
        started="2026-12-01T10:15:00+00:00",
        sparkctl_version="0.4.0",
        hosts=list(HOSTS),
        thresholds=THRESHOLDS,
        checks=checks,
        nccl=nccl
        if nccl is not None
        else [all_run("all_reduce", SIZES), all_run("all_gather", SIZES, 21.0)],
        notes=["GPU clocks not locked"],
        duration_s=184.25,
    )


def failing_report() -> Report:
    r = make_report()
    r.checks = [
        *r.checks,
        Check(
            "mesh_jumbo",
            "spark3",
            "spark4 via b",
            "failed",
            "ping -M do -s 8972 to 10.0.1.4: 100% loss <mtu 1500?>",
            0.5,
        ),
    ]
    r.localisation = [Finding("spark3", "enp1s0f1np1", "jumbo frames fail only on twin b")]
    return r


# ---------------------------------------------------------------------------
# human_size


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (8, "8 B"),
        (1000, "1000 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (32 * MiB, "32 MiB"),
        (1 << 30, "1 GiB"),
        (3 << 40, "3 TiB"),
    ],
)
def test_human_size(n: int, text: str) -> None:
    assert human_size(n) == text


# ---------------------------------------------------------------------------
# report.json


def test_json_round_trip(tmp_path: Path) -> None:
    report = failing_report()
    report.nccl.append(pair_run("all_reduce", "spark1", "spark2", SIZES, 23.0))
    run_dir = tmp_path / "results" / report.run_id
    json_path, html_path = write(report, run_dir)
    assert (json_path, html_path) == (run_dir / "report.json", run_dir / "report.html")
    assert sorted(p.name for p in run_dir.iterdir()) == ["report.html", "report.json"]  # no temp
    data = json.loads(json_path.read_text())
    assert data["verdict"] == "failed" and data["schema"] == 1
    assert json_path.read_text().startswith('{\n  "schema": 1,')  # indent 2
    for where in (run_dir, json_path):
        assert load(where).to_dict() == report.to_dict()


def test_write_replaces_an_earlier_report(tmp_path: Path) -> None:
    write(failing_report(), tmp_path)
    write(make_report(), tmp_path)
    assert load(tmp_path).verdict == "passed"
    assert "PASSED" in (tmp_path / "report.html").read_text()


def test_write_names_the_directory_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SparkctlError) as err:
        write(make_report(), blocker / "run")
    assert str(blocker / "run") in err.value.message


# ---------------------------------------------------------------------------
# report.html


def cell(page: str, check: str, host: str) -> str:
    """The matrix cell of ``check`` on ``host`` (by column position)."""
    table = page[page.index('<table class="matrix">') :]
    table = table[: table.index("</table>")]
    header = re.findall(r"<th>(.*?)</th>", table[: table.index("</tr>")])
    row = re.search(rf"<tr><th>{re.escape(check)}</th>(.*?)</tr>", table, re.S)
    assert row, f"no row {check}"
    cells: list[str] = re.findall(r"<td[^>]*>.*?</td>", row.group(1), re.S)
    return cells[header.index(host) - 1]


def test_html_matrix_and_failures() -> None:
    page = render_html(failing_report())
    assert page.startswith("<!DOCTYPE html>")
    assert '<span class="verdict" style="background:#cf222e">FAILED</span>' in page
    # header columns: every host, then the cluster column
    assert re.search(
        r"<th>check</th><th>spark1</th><th>spark2</th><th>spark3</th>"
        r"<th>spark4</th><th>cluster</th>",
        page,
    )
    assert 'class="cell-passed"' in cell(page, "twin_up", "spark1")
    assert "2/2" in cell(page, "twin_up", "spark1")  # several subjects: passed/total
    failing = cell(page, "mesh_jumbo", "spark3")
    assert 'class="cell-failed"' in failing and "1/2" in failing
    message = "ping -M do -s 8972 to 10.0.1.4: 100% loss <mtu 1500?>"
    assert htmllib.escape(f"spark4 via b: failed: {message}") in failing  # title attribute
    assert "spark4 via b" in failing  # visible subject, too
    assert 'class="cell-passed"' in cell(page, "mesh_jumbo", "spark4")
    assert 'class="cell-skipped"' in cell(page, "gpu_visible", "spark2")
    assert 'class="cell-none"' in cell(page, "ranks_unique", "spark1")
    assert 'class="cell-passed"' in cell(page, "ranks_unique", "cluster")
    # the printable Failures list names host, check, subject and the escaped message
    failures = page[page.index("<h2>Failures</h2>") : page.index("<h2>NCCL bandwidth</h2>")]
    assert (
        "<td>spark3</td><td>mesh_jumbo</td><td>spark4 via b</td>"
        '<td><span class="o o-failed">failed</span></td>'
        f"<td>{htmllib.escape(message)}</td>"
    ) in failures
    assert "<mtu" not in page  # escaped everywhere
    assert "jumbo frames fail only on twin b" in page and "GPU clocks not locked" in page


def test_html_plots_thresholds_and_no_outside_resources() -> None:
    report = make_report()
    report.nccl.append(pair_run("all_reduce", "spark1", "spark2", SIZES, 23.0))
    page = render_html(report)
    assert '<span class="verdict" style="background:#1a7f37">PASSED</span>' in page
    # one bandwidth plot per collective (the pair drawn faintly in it), and all_reduce's
    # latency by size up to 1 MiB
    assert page.count("<svg") == 3
    assert "<h3>all_reduce</h3>" in page and "<h3>all_gather</h3>" in page
    # line rate and threshold: in the thresholds table, the captions and the plots' legends
    assert "25 GB/s" in page and "20 GB/s" in page
    bandwidth, latency = page.split("<h2>All-reduce latency</h2>")
    assert "all_reduce latency" in latency and "time (us, log)" in latency
    for svg in re.findall(r"<svg.*?</svg>", bandwidth, re.S):
        assert "line rate 25 GB/s" in svg and "threshold 20 GB/s" in svg
        assert "1M" in svg and "4M" in svg  # human size labels on the x axis
    # judged sizes tabulated
    assert "<td>4 MiB</td>" in page and "<td>2 MiB</td>" in page
    # the pair is tabulated
    assert "spark1 + spark2" in page
    # self-contained: no script, nothing fetched, no URL at all
    assert "<script" not in page.lower()
    assert "http://" not in page and "https://" not in page
    # the only references are to the page's own fragments (the plots' markers and clip paths)
    assert not re.search(r"""(?:src|href)\s*=\s*(?:"(?!#)|'(?!#)|(?!["'#]))""", page)
    assert "@import" not in page and "url(http" not in page
    # several plots on one page: their ids must not collide
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert ids and len(ids) == len(set(ids))
    refs = set(re.findall(r'(?:href="#|url\(#)([^")]+)', page))
    assert refs <= set(ids)


def test_the_latency_section_tabulates_all_reduce_up_to_1_mib_from_a_real_log() -> None:
    """A real all_reduce_perf log from 8 B (2 x GH200, nccl-tests 2.17.8, NVIDIA/nccl-tests
    #369: tests/fixtures/nccl/SOURCES.md): its times up to 1 MiB, as the log printed
    them, in the latency table; a run without those sizes says so."""
    from sparkctl.nccl_parse import parse  # noqa: PLC0415
    from sparkctl.report.model import latency_rows  # noqa: PLC0415

    log = (
        Path(__file__).parents[1]
        / "fixtures"
        / "nccl"
        / "gh200-2.17.8-all-reduce-wrong-oob-failed.log"
    )
    parsed = parse(log.read_text(), source=log.name)
    run = replace(all_run("all_reduce", SIZES), report=parsed.to_dict())
    report = make_report(nccl=[run])
    rows = latency_rows(report)
    assert rows[0] == (8, 17.49, 16.41)  # the log's first row: 8 B, 17.49 / 16.41 us
    assert [size for size, _, _ in rows] == [8 << k for k in range(18)]  # 8 B .. 1 MiB
    every = latency_rows(report, max_bytes=None)  # the bench's curve: every size swept
    assert every[: len(rows)] == rows and every[-1][0] > 1 << 20
    from sparkctl import report as report_io  # noqa: PLC0415
    from sparkctl.bench.run import latency_curve  # noqa: PLC0415
    from sparkctl.validate.run import last_good_link  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as state, pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARKCTL_STATE_DIR", state)
        assert latency_curve(report.cluster)[0] == []  # no last-good yet: said in the note
        run_dir = last_good_link(report.cluster).with_name("20261205-000000-validate")
        run_dir.mkdir(parents=True)
        report_io.write(report, run_dir)
        last_good_link(report.cluster).symlink_to(run_dir.name)
        curve, name, note = latency_curve(report.cluster)
    assert curve == [(size, oop) for size, oop, _ in every] and name == run_dir.name
    assert note == ""
    page = render_html(report)
    assert '<td>8 B</td><td class="num">17.49</td><td class="num">16.41</td>' in page
    # and one line of it in validate's terminal summary
    from sparkctl import console  # noqa: PLC0415
    from sparkctl.present import summary  # noqa: PLC0415

    with console.out.capture() as captured:
        summary.show(report)
    line = next(x for x in captured.get().splitlines() if x.startswith("all_reduce latency"))
    assert line.startswith("all_reduce latency (us, out-of-place): 8 B 17.49, 1 KiB ")
    assert "1 MiB " in line
    no_small = make_report(nccl=[all_run("all_reduce", BIG)])
    assert "No all_reduce sizes up to 1 MiB" in render_html(no_small)


def test_html_baseline_section_and_runs_without_rows() -> None:
    base = make_report("20261130T090000Z")
    current = make_report(
        nccl=[
            all_run("all_reduce", SIZES, scale={SIZES[-1]: 0.6}),
            NcclRun("all_gather", "all", list(HOSTS), "error", "mpirun exited 1 before any row"),
        ]
    )
    current.baseline = compare(current, base, "/state/results/dgx/last-good", 0.1)
    page = render_html(current)
    assert page.count("<svg") == 2  # all_reduce's bandwidth and its latency up to 1 MiB
    assert "No result rows to plot." in page
    assert "mpirun exited 1 before any row" in page
    section = page[page.index("<h2>Baseline</h2>") :]
    assert "20261130T090000Z" in section and "/state/results/dgx/last-good" in section
    assert "<td>4 MiB</td>" in section and "-40.0%" in section


def test_render_with_nothing_in_it() -> None:
    page = render_html(make_report(nccl=[], checks=[]))
    assert "No node checks in this run." in page and "No NCCL runs in this run." in page
    assert "<svg" not in page


# ---------------------------------------------------------------------------
# load() refusals


def refused(path: Path) -> str:
    with pytest.raises(SparkctlError) as err:
        load(path)
    assert err.value.code == ExitCode.BAD_INPUT
    return err.value.message


def test_load_missing(tmp_path: Path) -> None:
    message = refused(tmp_path / "nope.json")
    assert str(tmp_path / "nope.json") in message and "no such file" in message
    message = refused(tmp_path)  # a directory without a report
    assert str(tmp_path / "report.json") in message and "results directory" in message


def test_load_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text('{"schema": 1, "run_id": ')
    message = refused(path)
    assert str(path) in message and "not JSON" in message and "line 1" in message
    path.write_bytes(b"\xff\xfe\x00")
    assert "not a text file" in refused(path)


def test_load_wrong_schema(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    data = make_report().to_dict()
    data["schema"] = 2
    path.write_text(json.dumps(data))
    message = refused(path)
    assert str(path) in message and "schema 2" in message and "schema 1" in message
    path.write_text(json.dumps({"hello": "world"}))
    assert "not a sparkctl validate report" in refused(path)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: [d], "a JSON list, not a report object"),
        (lambda d: {**d, "hosts": "spark1"}, "hosts is a string, not a list"),
        (lambda d: {k: v for k, v in d.items() if k != "thresholds"}, "thresholds is missing"),
        (
            lambda d: d["checks"][0].update(outcome="bogus"),
            "checks[0].outcome is 'bogus', not one of passed, failed, skipped, error",
        ),
        (lambda d: d["checks"][1].update(colour="red"), "checks[1] has unknown field(s) colour"),
        (
            lambda d: d["nccl"][0]["report"]["rows"][3]["out_of_place"].update(busbw="fast"),
            "nccl[0].report.rows[3].out_of_place.busbw is a string, not a number",
        ),
        (
            lambda d: d["nccl"][1]["judged"][0].update(size=True),
            "nccl[1].judged[0].size is a boolean, not an integer",
        ),
        (
            lambda d: d["thresholds"].update(line_rate_gbytes=None),
            "thresholds.line_rate_gbytes is null, not a number",
        ),
    ],
)
def test_load_wrong_shape(tmp_path: Path, mutate: Any, expected: str) -> None:
    data = make_report().to_dict()
    changed = mutate(data)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(changed if changed is not None else data))
    message = refused(path)
    assert str(path) in message and expected in message


# ---------------------------------------------------------------------------
# compare()


def test_compare_passes_within_tolerance() -> None:
    base = make_report("20261130T090000Z")
    current = make_report(
        nccl=[
            all_run("all_reduce", SIZES, scale={SIZES[-1]: 0.95}),
            all_run("all_gather", SIZES, 21.0),
        ]
    )
    result = compare(current, base, "last-good", 0.1)
    assert result.outcome == "passed" and result.run_id == "20261130T090000Z"
    assert result.path == "last-good" and result.tolerance == 0.1
    assert [(i.collective, i.size, i.outcome) for i in result.items] == [
        ("all_reduce", SIZES[-2], "passed"),
        ("all_reduce", SIZES[-1], "passed"),
        ("all_gather", SIZES[-2], "passed"),
        ("all_gather", SIZES[-1], "passed"),
    ]
    drop = result.items[1]
    assert drop.change == pytest.approx(-0.05, abs=0.002)
    assert "4 size(s) of 2 collective(s) within 10.0%" in result.message
    current.baseline = result
    assert current.verdict == "passed"


def test_compare_fails_beyond_tolerance_naming_collective_and_size() -> None:
    base = make_report("20261130T090000Z", nccl=[all_run("all_reduce", BIG, 0.13)])
    current = make_report(nccl=[all_run("all_reduce", BIG, 0.13, scale={32 * MiB: 0.65})])
    b32 = base.nccl[0].busbw_by_size()[32 * MiB]
    c32 = current.nccl[0].busbw_by_size()[32 * MiB]
    result = compare(current, base, "/r/20261130T090000Z", 0.1)
    assert result.outcome == "failed"
    assert [i.outcome for i in result.items] == ["passed", "failed"]
    change = (c32 - b32) / b32
    assert result.message.startswith(
        f"all_reduce at 32 MiB: {gbs(c32)} GB/s is {-change * 100:.1f}% below the "
        f"baseline's {gbs(b32)} GB/s (run 20261130T090000Z)"
    )
    assert "16 MiB" not in result.message
    current.baseline = result
    assert current.verdict == "failed"  # a failed comparison fails the run


def test_compare_skips_a_collective_the_baseline_lacks() -> None:
    base = make_report("20261130T090000Z", nccl=[all_run("all_reduce", SIZES)])
    current = make_report(nccl=[all_run("all_gather", SIZES, 21.0)])
    result = compare(current, base, "last-good", 0.1)
    assert result.outcome == "skipped" and result.items == []
    assert "all_gather (not in the baseline)" in result.message
    both = make_report(nccl=[all_run("all_reduce", SIZES), all_run("all_gather", SIZES, 5.0)])
    result = compare(both, base, "last-good", 0.1)
    assert result.outcome == "passed" and {i.collective for i in result.items} == {"all_reduce"}
    assert "all_gather (not in the baseline)" in result.message


def test_compare_skips_a_size_only_in_one_run() -> None:
    base = make_report("20261130T090000Z", nccl=[all_run("all_reduce", SIZES[:-1])])
    current = make_report(nccl=[all_run("all_reduce", SIZES)])
    result = compare(current, base, "last-good", 0.1)
    assert [(i.size, i.outcome) for i in result.items] == [(SIZES[-2], "passed")]
    assert result.outcome == "passed"
    assert "all_reduce at 4 MiB (not in the baseline's sizes)" in result.message
    # a size only the baseline judged is not looked for: only this run's judged sizes count
    result = compare(
        make_report(nccl=[all_run("all_reduce", SIZES[:-1])]),
        make_report("b", nccl=[all_run("all_reduce", SIZES)]),
        "b",
        0.1,
    )
    assert [i.size for i in result.items] == SIZES[-3:-1] and result.outcome == "passed"


def test_compare_tolerance_boundary() -> None:
    def pair(now: float) -> tuple[Report, Report]:
        base = make_report("b", nccl=[all_run("all_reduce", BIG, judged_n=1)])
        cur = make_report(nccl=[all_run("all_reduce", BIG, judged_n=1)])
        rows = cur.nccl[0].report["rows"]  # type: ignore[index]
        for half in ("out_of_place", "in_place"):
            rows[-1][half]["busbw"] = now
        for half in ("out_of_place", "in_place"):
            base.nccl[0].report["rows"][-1][half]["busbw"] = 0.125  # type: ignore[index]
        return cur, base

    cur, base = pair(0.1125)  # exactly 10% down: passes
    assert compare(cur, base, "b", 0.1).outcome == "passed"
    cur, base = pair(0.11249)  # just beyond: fails
    result = compare(cur, base, "b", 0.1)
    assert result.outcome == "failed"
    assert (
        "all_reduce at 32 MiB: 0.112 GB/s is 10.0% below the baseline's 0.125 GB/s"
        in result.message
    )
    assert compare(cur, base, "b", 0.2).outcome == "passed"
    cur, base = pair(0.2)  # faster is never a regression
    assert compare(cur, base, "b", 0.0).outcome == "passed"


def test_compare_does_not_compare_errored_runs() -> None:
    base = make_report(
        "b", nccl=[all_run("all_reduce", SIZES), all_run("all_gather", SIZES, outcome="error")]
    )
    current = make_report(
        nccl=[all_run("all_reduce", SIZES, outcome="error"), all_run("all_gather", SIZES)]
    )
    result = compare(current, base, "b", 0.1)
    assert result.outcome == "skipped" and result.items == []
    assert "all_reduce (this run's measurement errored)" in result.message
    assert "all_gather (errored there)" in result.message
    nothing = compare(make_report(nccl=[]), base, "b", 0.1)
    assert nothing.outcome == "skipped" and "no all-node NCCL run" in nothing.message


def test_compare_refuses_a_negative_tolerance() -> None:
    with pytest.raises(SparkctlError) as err:
        compare(make_report(), make_report("b"), "b", -0.1)
    assert err.value.code == ExitCode.BAD_INPUT


def test_baseline_survives_the_round_trip(tmp_path: Path) -> None:
    current = make_report(nccl=[all_run("all_reduce", BIG, 0.13, scale={32 * MiB: 0.65})])
    current.baseline = compare(
        current, make_report("b", nccl=[all_run("all_reduce", BIG, 0.13)]), "b", 0.1
    )
    write(current, tmp_path)
    again = load(tmp_path)
    assert again.baseline == current.baseline and again.verdict == "failed"
    assert replace(again, baseline=None).verdict == "passed"


# ---------------------------------------------------------------- the fit in the report
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def real_run(name: str) -> NcclRun:
    """A real GB10 log judged as validate judges it on a Spark (the role's thresholds),
    its bandwidth only: the public logs carry no NCCL INFO lines, so their transport is
    not judged here (test_nccl_parse judges it)."""
    from sparkctl.nccl_parse import parse  # noqa: PLC0415
    from sparkctl.validate import nccl_judge  # noqa: PLC0415

    return nccl_judge.gate_log(
        parse((FIXTURES / name).read_text(), name),
        nccl_judge.role_thresholds(25.0),
        name,
        rdma_expected=False,
    )


def test_html_shows_the_fit_beside_the_rows_and_plots_it(tmp_path: Path) -> None:
    from sparkctl.validate import nccl_judge  # noqa: PLC0415

    run = real_run("gb10-2.19.6-all-gather.log")
    assert run.fit is not None and run.outcome == "passed"
    report = replace(make_report(nccl=[run]), thresholds=nccl_judge.role_thresholds(25.0))
    page = render_html(report)
    text = htmllib.unescape(re.sub(r"<[^>]+>", " ", page))
    # The fit table: 16 GiB top, fitted over 4, 8 and 16 GiB (figures: test_validate_nccl).
    assert "alpha-beta fit over 4 GiB .. 16 GiB (3 sizes), out-of-place and in-place" in text
    assert f" {run.fit.busbw:.3f}".rstrip("0") in text
    assert f"± {run.fit.busbw_se:.3f}" in text and run.fit.busbw_se > 0
    assert f"{run.fit.latency_us:.0f}" in text
    assert "23.971 at 16 GiB" in text and "21.875" in text and "17.5" in text
    # The plot draws the model and its asymptote, and the collective's threshold.
    assert "alpha-beta fit (3737 us latency)" in page
    assert "fitted busbw 24.217 GB/s" in page and "threshold 21.875 GB/s" in page
    # report.json keeps the fit and reads it back.
    write(report, tmp_path)
    again = load(tmp_path)
    assert again.nccl[0].fit == run.fit
    assert again.thresholds.fractions == {
        "all_gather": 0.875,
        "all_reduce": None,
        "reduce_scatter": None,
    }


def test_html_an_ungated_collective_says_so() -> None:
    from sparkctl.validate import nccl_judge  # noqa: PLC0415

    run = replace(real_run("gb10-2.19.6-all-gather.log"), collective="all_reduce")
    page = render_html(
        replace(make_report(nccl=[run]), thresholds=nccl_judge.role_thresholds(25.0))
    )
    assert "not gated on bandwidth (measured and reported)" in page
    assert "threshold 21.875 GB/s" not in page
    # The judged rows are not held against all_gather's threshold either.
    assert run.judged and "&#8805; threshold (21.875" not in page
    assert page.count("<td>not gated</td>") == len(run.judged)


def test_the_terminal_summary_shows_the_fits_uncertainty_and_a_run_not_judged(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkctl import console  # noqa: PLC0415
    from sparkctl.present import summary  # noqa: PLC0415
    from sparkctl.validate import nccl_judge  # noqa: PLC0415

    monkeypatch.setattr(console.out, "width", 200)  # one table row per line

    run = real_run("gb10-2.19.6-all-gather.log")
    unseen = replace(run, outcome="not_judged", message="not judged: ... NCCL_DEBUG=INFO")
    report = replace(make_report(nccl=[unseen]), thresholds=nccl_judge.role_thresholds(25.0))
    summary.show(report)
    out = capsys.readouterr().out
    assert run.fit is not None and f"{run.fit.busbw:.3f} ± {run.fit.busbw_se:.3f}" in out
    assert "NOT JUDGED" in out and report.verdict == "not_judged"
    page = render_html(report)
    assert 'class="o o-not_judged">not_judged<' in page
