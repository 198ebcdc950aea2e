"""sparkctl.metrics: the textfile output of a validate report (real GB10 nccl-tests logs
judged by validate's own code, compared with a baseline by its own compare()) and of a
real serve verify run (the fake SGLang of test_serve_verify), read back with
prometheus-client's own parser and linted by promtool; the temp-file-and-rename write;
SPARKCTL_TEXTFILE_DIR; and docs/monitoring.md's table against the metrics the code
declares."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from sparkctl import metrics
from sparkctl.report.baseline import compare
from sparkctl.report.model import Check, NcclRun, Report
from sparkctl.validate import nccl_judge
from tests.unit import plans
from tests.unit.test_serve_verify import (
    Answer,
    api_key,
    fake_sglang,
    run_verify_command,
)
from tests.unit.test_validate_report import HOSTS, make_report, real_run

__all__ = ["api_key"]  # the fixture, imported for pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "monitoring.md"
GiB = 1 << 30


def promtool() -> str | None:
    """promtool (Debian's prometheus package): CI must have it; a workstation may not."""
    found = shutil.which("promtool")
    if found is None and os.environ.get("CI"):
        pytest.fail("promtool is missing: apt-get install prometheus (scripts/bootstrap.sh)")
    return found


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams: dict[str, Any], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of the family that ``name`` (a sample name) belongs to, by its labels."""
    family = name.removesuffix("_total") if name.endswith("_total") else name
    return {
        tuple(sorted(s.labels.items())): s.value for s in fams[family].samples if s.name == name
    }


def check_declared(fams: dict[str, Any]) -> None:
    """Each family read back is declared in METRICS, with its type, help and labels."""
    for family in fams.values():
        name = family.name + ("_total" if family.type == "counter" else "")
        spec = metrics.BY_NAME[name]
        assert family.type == spec.kind, name
        assert family.documentation == spec.help, name
        for s in family.samples:
            assert s.name == name, s
            assert sorted(s.labels) == sorted(spec.labels), (name, s.labels)


def lint(path: Path) -> None:
    """promtool's own lint of the exposition (names, units, counters' _total)."""
    tool = promtool()
    if tool is None:
        return
    proc = subprocess.run(
        [tool, "check", "metrics"],
        input=path.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- validate
def validate_report() -> tuple[Report, Report]:
    """This run (a degraded GB10 all_gather log, one check failed on spark3) and the
    baseline it is compared with (a healthy GB10 log), as validate would write them."""
    th = nccl_judge.role_thresholds(25.0)
    good = replace(
        make_report("20261201T101500Z", nccl=[real_run("gb10-2.19.6-all-gather.log")]),
        thresholds=th,
    )
    current_run = real_run("gb10-2.18.3-all-gather-degraded-direct-cable.log")
    pair = NcclRun("all_gather", "pair", ["spark1", "spark2"], "passed", "pair ok")
    now = replace(
        make_report("20261202T101500Z", nccl=[current_run, pair]),
        thresholds=th,
    )
    now.checks.append(Check("mtu", "spark3", "enp1s0f1np1", "failed", "mtu 1500, want 9000"))
    now.baseline = compare(now, good, "/state/results/dgx/20261201T101500Z", 0.1)
    return now, good


MEM = {h: (100 + i) * GiB for i, h in enumerate(HOSTS)}


def test_validate_metrics_read_back_as_documented(tmp_path: Path) -> None:
    report, good = validate_report()
    assert report.baseline is not None and report.baseline.items
    path = metrics.write(metrics.validate_metrics(report, MEM), tmp_path, "sparkctl-validate-dgx")
    assert path == tmp_path / "sparkctl-validate-dgx.prom"
    text = path.read_text()
    fams = families(text)
    check_declared(fams)
    lint(path)

    verdict = samples(fams, "sparkctl_validate_verdict")
    assert verdict == {
        (("cluster", "dgx"), ("verdict", v)): (1.0 if v == report.verdict else 0.0)
        for v in ("passed", "failed", "not_judged")
    }
    assert report.verdict == "failed"
    failed = samples(fams, "sparkctl_validate_checks_failed")
    assert failed[(("cluster", "dgx"), ("node", "spark3"))] == 1.0
    assert failed[(("cluster", "dgx"), ("node", "spark1"))] == 0.0
    assert failed[(("cluster", "dgx"), ("node", "cluster"))] == 0.0

    # bytes per second, from the report's GB/s (10^9 bytes, as nccl-tests' own)
    run = report.nccl[0]
    assert run.fit is not None
    key = (("cluster", "dgx"), ("collective", "all_gather"))
    assert samples(fams, "sparkctl_validate_busbw_bytes_per_second") == {
        key: pytest.approx(run.fit.busbw * 1e9)
    }
    threshold = report.thresholds.threshold_for("all_gather")
    assert threshold is not None
    assert samples(fams, "sparkctl_validate_busbw_threshold_bytes_per_second") == {
        key: pytest.approx(threshold * 1e9)
    }
    worst = min(i.current_busbw / i.baseline_busbw for i in report.baseline.items)
    assert samples(fams, "sparkctl_validate_busbw_baseline_ratio") == {key: pytest.approx(worst)}
    assert worst < 1 - report.baseline.tolerance  # the degraded cable is a regression
    assert samples(fams, "sparkctl_validate_baseline_tolerance_ratio") == {
        (("cluster", "dgx"),): 0.1
    }
    assert samples(fams, "sparkctl_validate_memory_available_bytes") == {
        (("cluster", "dgx"), ("node", h)): float(v) for h, v in MEM.items()
    }
    # started (make_report: 2026-12-01T10:15:00+00:00) plus the run's 184.25 s
    assert report.started == "2026-12-01T10:15:00+00:00"
    assert samples(fams, "sparkctl_validate_timestamp_seconds") == {
        (("cluster", "dgx"),): datetime(2026, 12, 1, 10, 15, tzinfo=UTC).timestamp() + 184.25
    }
    assert samples(fams, "sparkctl_validate_duration_seconds") == {(("cluster", "dgx"),): 184.25}
    # the pair run is localisation, not the gate: no series of its own
    assert len(samples(fams, "sparkctl_validate_busbw_bytes_per_second")) == 1
    # no baseline: no ratio and no tolerance, rather than a made-up 1.0
    bare = families(metrics.write(metrics.validate_metrics(good), tmp_path, "bare").read_text())
    assert "sparkctl_validate_busbw_baseline_ratio" not in bare
    assert "sparkctl_validate_memory_available_bytes" not in bare


def test_an_ungated_collective_has_no_threshold(tmp_path: Path) -> None:
    report, _ = validate_report()
    th = replace(report.thresholds, fractions={"all_gather": None})
    fams = families(
        metrics.write(
            metrics.validate_metrics(replace(report, thresholds=th)), tmp_path, "x"
        ).read_text()
    )
    assert "sparkctl_validate_busbw_threshold_bytes_per_second" not in fams
    assert "sparkctl_validate_busbw_bytes_per_second" in fams


def test_fabric_metrics_name_every_twin_netdev_with_the_planned_mtu(tmp_path: Path) -> None:
    plan = plans.plan()
    path = metrics.write(metrics.fabric_metrics("sim", plan), tmp_path, "f")
    fams = families(path.read_text())
    check_declared(fams)
    lint(path)
    want = {
        (
            ("cluster", "sim"),
            ("device", twin.netdev),
            ("node", node),
            ("twin", twin.twin),
        ): float(plan.node(node).roce_fabric.mtu)
        for node in plan.nodes
        for twin in plan.node(node).roce_fabric.twins
    }
    assert samples(fams, "sparkctl_fabric_expected_mtu_bytes") == want
    assert len(want) == 2 * len(plan.nodes)


# ---------------------------------------------------------------- writing
class _Peek(Collector):
    """Collected while write_to_textfile writes: what the directory holds at that moment."""

    def __init__(self, directory: Path, target: Path) -> None:
        self.directory, self.target = directory, target
        self.seen: list[str] = []
        self.target_text = ""

    def collect(self) -> Iterator[Metric]:
        self.seen = sorted(p.name for p in self.directory.iterdir())
        self.target_text = self.target.read_text()
        yield GaugeMetricFamily("peek", "peek", value=1.0)


def test_the_file_is_replaced_whole_by_rename(tmp_path: Path) -> None:
    """While the new figures are being written, the .prom file is still the old one,
    whole, and the new one sits under a name the collector does not read (it reads
    *.prom only); afterwards only the .prom file is there, with the new figures."""
    report, _ = validate_report()
    target = tmp_path / "sparkctl-validate-dgx.prom"
    metrics.write(metrics.validate_metrics(report), tmp_path, "sparkctl-validate-dgx")
    old = target.read_text()
    old_inode = target.stat().st_ino

    registry = metrics.validate_metrics(replace(report, duration_s=1.5))
    peek = _Peek(tmp_path, target)
    registry.register(peek)
    metrics.write(registry, tmp_path, "sparkctl-validate-dgx")

    assert peek.target_text == old  # the old file, whole, while the new one is written
    temp = [n for n in peek.seen if n != target.name]
    assert len(temp) == 1 and temp[0].startswith(target.name + ".")
    assert not temp[0].endswith(".prom")
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    new = target.read_text()
    assert 'sparkctl_validate_duration_seconds{cluster="dgx"} 1.5' in new
    assert target.stat().st_ino != old_inode  # a new file renamed over, not rewritten


def test_figures_refuse_what_the_table_does_not_declare() -> None:
    f = metrics.Figures()
    with pytest.raises(ValueError, match="not a metric sparkctl declares"):
        f.set("sparkctl_made_up", 1.0, cluster="x")
    with pytest.raises(ValueError, match="takes labels"):
        f.set("sparkctl_status_rank_up", 1.0, cluster="x", node="spark1")
    with pytest.raises(ValueError, match="not a number"):
        f.set("sparkctl_status_probe_duration_seconds", float("nan"), cluster="x", group="g")


def test_the_watchdog_counter_is_a_counter_without_created(tmp_path: Path) -> None:
    f = metrics.Figures()
    f.set("sparkctl_watchdog_restarts_total", 3, cluster="sim", group="g1")
    f.set("sparkctl_watchdog_gave_up", 0, cluster="sim", group="g1")
    path = metrics.write(f.registry(), tmp_path, "sparkctl-watch-sim")
    text = path.read_text()
    assert "# TYPE sparkctl_watchdog_restarts_total counter" in text
    assert 'sparkctl_watchdog_restarts_total{cluster="sim",group="g1"} 3.0' in text
    assert "_created" not in text
    check_declared(families(text))
    lint(path)


def test_nothing_is_written_without_the_directory_and_a_failure_only_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report, _ = validate_report()
    plan = plans.plan(HOSTS)
    facts = {h: {"mem_available": v} for h, v in MEM.items()}
    monkeypatch.delenv(metrics.TEXTFILE_ENV, raising=False)
    assert metrics.publish_validate(report, plan, facts) == []
    monkeypatch.setenv(metrics.TEXTFILE_ENV, "")
    assert metrics.publish_validate(report, plan, facts) == []

    missing = tmp_path / "no-such-dir"
    monkeypatch.setenv(metrics.TEXTFILE_ENV, str(missing))
    assert metrics.publish_validate(report, plan, facts) == []
    err = capsys.readouterr().err
    assert f"metrics not written to {missing}/sparkctl-validate-dgx.prom" in err
    assert "SPARKCTL_TEXTFILE_DIR" in err and not missing.exists()

    monkeypatch.setenv(metrics.TEXTFILE_ENV, str(tmp_path))
    written = metrics.publish_validate(report, plan, facts)
    assert [p.name for p in written] == ["sparkctl-validate-dgx.prom", "sparkctl-fabric-dgx.prom"]
    fams = families(written[0].read_text())
    assert samples(fams, "sparkctl_validate_memory_available_bytes")[
        (("cluster", "dgx"), ("node", "spark2"))
    ] == float(MEM["spark2"])


# ---------------------------------------------------------------- serve verify
def test_serve_verify_writes_its_figures_where_the_directory_is_set(
    tmp_path: Path,
    api_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sparkctl serve verify INVENTORY` as typed against the fake SGLang: the file holds
    the verdict, every rank, and the figures verify measured (the note in its report)."""
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(metrics.TEXTFILE_ENV, str(textfiles))
    run_dir = tmp_path / "run"
    # the four nodes of inventory/sim.ini
    four = {"server_info": Answer(body={"tp_size": 4, "nnodes": 4, "version": "0.5.17"})}
    code, out, err = run_verify_command(monkeypatch, capsys, four, run_dir)
    assert code in (0, None), (out, err)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["verdict"] == "passed"
    path = textfiles / f"sparkctl-serve-verify-{report['cluster']}.prom"
    fams = families(path.read_text())
    check_declared(fams)
    lint(path)
    cluster = report["cluster"]
    assert (
        samples(fams, "sparkctl_serve_verify_verdict")[
            (("cluster", cluster), ("verdict", "passed"))
        ]
        == 1.0
    )
    ranks = samples(fams, "sparkctl_serve_verify_rank_running")
    nodes = report["hosts"]
    group = plans.plan(nodes).node(nodes[0]).sglang.group
    assert ranks == {(("cluster", cluster), ("group", group), ("node", n)): 1.0 for n in nodes}
    note = next(n for n in report["notes"] if n.startswith("serving figures: "))
    figures = dict(p.split(" ") for p in note.removeprefix("serving figures: ").split(", "))
    key = (("cluster", cluster), ("group", group))
    assert samples(fams, "sparkctl_serve_verify_ttft_seconds") == {key: float(figures["ttft_s"])}
    assert samples(fams, "sparkctl_serve_verify_e2e_latency_seconds") == {
        key: float(figures["e2e_s"])
    }
    assert samples(fams, "sparkctl_serve_verify_decode_tokens_per_second") == {
        key: float(figures["decode_tokens_per_s"])
    }
    assert float(figures["decode_tokens_per_s"]) > 0


def test_a_failed_verify_writes_no_figures_and_names_the_group_of_each_note(
    tmp_path: Path, api_key: str
) -> None:
    from tests.unit.test_serve_verify import _verify  # noqa: PLC0415

    with fake_sglang({"chat": Answer(500, b"oops", "text/plain")}) as port:
        report = _verify(tmp_path, port)
    assert report.verdict == "failed"
    fams = families(
        metrics.write(
            metrics.serve_verify_metrics(report, {"g1": report.hosts}), tmp_path, "v"
        ).read_text()
    )
    assert "sparkctl_serve_verify_ttft_seconds" not in fams
    assert (
        samples(fams, "sparkctl_serve_verify_verdict")[(("cluster", "sim"), ("verdict", "failed"))]
        == 1.0
    )
    # two groups: each note names its own
    two = replace(
        report,
        notes=[
            "group g1: serving figures: ttft_s 0.100, e2e_s 1.000, decode_tokens_per_s 50.000",
            "group g2: serving figures: ttft_s 0.200, e2e_s 2.000, decode_tokens_per_s 25.000",
        ],
    )
    assert metrics.serving_figures(two) == {
        "g1": {"ttft_s": 0.1, "e2e_s": 1.0, "decode_tokens_per_s": 50.0},
        "g2": {"ttft_s": 0.2, "e2e_s": 2.0, "decode_tokens_per_s": 25.0},
    }


# ---------------------------------------------------------------- the documentation
_ROW = re.compile(
    r"^\|\s*`(sparkctl_[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|\s*([^|]*)\|\s*([^|]*)\|\s*([^|]*)\|"
)


def test_the_doc_table_lists_exactly_the_metrics_the_code_declares() -> None:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            labels = tuple(re.findall(r"`(\w+)`", m[3]))
            rows[m[1]] = (m[2], labels, m[4].strip(), m[5].strip())
    declared = {
        s.name: (s.kind, s.labels, s.writer.replace(" ", ""), s.help) for s in metrics.METRICS
    }
    documented = {
        name: (kind, labels, re.sub(r"[`\s]|sparkctl", "", writer), what)
        for name, (kind, labels, writer, what) in rows.items()
    }
    assert documented == declared


def test_every_name_follows_the_conventions() -> None:
    for spec in metrics.METRICS:
        assert re.fullmatch(r"sparkctl_[a-z0-9_]+", spec.name), spec.name
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert "cluster" in spec.labels, spec.name
        assert not re.search(r"_(ms|milliseconds|gb|gbytes|mib|percent)(_|$)", spec.name)
