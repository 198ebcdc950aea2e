"""One bench level end to end, on this machine: two real stand-in ranks on loopback
(tests/unit/test_sglang_standin.py's group) serve the load, their /metrics is read as
serve watch reads it, and each "node" is this host sampled by the real sample command
run by bash (loopback stands in for the twin). Then report.json, its baseline
comparison and report.html from that level."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sparkctl.bench import html, layouts, run
from sparkctl.bench.load import Workload
from sparkctl.bench.sample import sample_command
from sparkctl.endpoint import Endpoint
from sparkctl.errors import SparkctlError
from sparkctl.serve import probe
from tests.unit.test_sglang_standin import KEY, _up, cluster, write_model

pytestmark = pytest.mark.unit

NODES = ["n1", "n2"]


@dataclass
class LocalGroup:
    name: str
    members: list[str]
    base_url: str
    tls_ca_file: str | None = None

    @property
    def head(self) -> str:
        return self.members[0]


class LocalCluster:
    """What the bench asks of a cluster, with every node this host."""

    def __init__(self, base_url: str) -> None:
        self.nodes = NODES
        self._group = LocalGroup("a", NODES, base_url)
        self.head = NODES[0]
        self.plan = SimpleNamespace(
            node=lambda _n: SimpleNamespace(
                roce_fabric=SimpleNamespace(speed_mbps=0), fabric_a_ip="127.0.0.1", fabric_b_ip=""
            )
        )

    def groups(self) -> list[LocalGroup]:
        return [self._group]

    def each_own(
        self, commands: Mapping[str, str], timeout: int = 60
    ) -> dict[str, tuple[int, str]]:
        out = {}
        for node, command in commands.items():
            p = subprocess.run(
                ["bash", "-c", command.replace("{sudo}", "")],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            out[node] = (p.returncode, p.stdout + p.stderr)
        return out


@pytest.fixture(scope="module")
def level(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("bench-run")
    with cluster(tmp, write_model(tmp / "model"), 2) as c, probe.client(None, 120) as http:
        _up(c)
        base = f"http://127.0.0.1:{c.port}"
        endpoint = Endpoint(http, base, {"Authorization": f"Bearer {KEY}"}, "toy")
        command = sample_command([("a", "lo", "")], fabric_addresses=["127.0.0.1"])
        ctx = run.Context(
            cluster=cast(Any, LocalCluster(base)),
            endpoint=endpoint,
            workload=Workload(16, 48, seed=3),
            opts=run.Options(cast(Any, None), concurrency=(2,), requests=6, interval_s=0.3),
            commands=dict.fromkeys(NODES, command),
            line=125e6,
            shape={"hidden": 2048, "layers": 16, "element_bytes": 2},
            curve=[(8, 20.0), (4096, 25.0), (1 << 20, 400.0)],
            began=0.0,
            progress=lambda _line: None,
        )
        import time  # noqa: PLC0415

        ctx.began = time.monotonic()
        yield run.run_one(ctx, 2, 0)


def test_a_level_measures_requests_gauges_nodes_and_the_communication_share(
    level: dict[str, Any],
) -> None:
    f = level["figures"]
    assert (f["requests"], f["completed"], f["errors"]) == (6, 6, 0)
    assert f["output_tokens"] == 6 * 48 and f["output_tokens_per_s"] > 0
    assert 0 < f["ttft_ms"]["p50"] <= f["e2e_ms"]["p50"]
    share = level["comm"]["a"]
    assert share["allreduces_per_token"] == 32  # 2 x 16 layers
    assert share["message_bytes"] >= 2048 * 2  # hidden x bf16 x the batch
    assert share["ms_per_token"] == pytest.approx(f["tpot_ms"]["p50"], abs=1e-3)
    assert "communication ~" in share["line"]
    # the head's /metrics, read with every sample (what it says is SGLang's: the running
    # gauge is written after a prefill, without the batch it prefills, and every 40th
    # decode step, so a short level may read 0 throughout: the share then takes the
    # clients' concurrency as the batch)
    gauges = level["gauges"]["a"]
    assert gauges["running_max"] is not None and gauges["queued_max"] is not None
    for node in NODES:
        n = level["nodes"][node]
        assert n["mem_available_min_bytes"] > 0
        assert n["twins"]["a"]["source"] == "netdev"
        # the requests themselves crossed loopback while the level ran
        assert n["twins"]["a"]["tx_bytes_per_s"] > 0 and n["twins"]["a"]["utilisation"] > 0
        assert len(level["series"][node]) >= 1
    assert level["findings"] == [] and level["pace_setter"] is None  # one host: no one apart
    assert level["sample_errors"] == {}


def _report(levels: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    report = {
        "schema": run.SCHEMA,
        "kind": "bench",
        "cluster": "unit",
        "run_id": "20261205-000000-bench",
        "started": "2026-12-05T00:00:00Z",
        "duration_s": 3.0,
        "inventory": "inventory/sim.ini",
        "sparkctl_version": "0",
        "endpoint": {"url": "http://127.0.0.1:1", "via": "group a's head", "model": "toy"},
        "groups": {"a": NODES},
        "workload": {
            "input_words": 16,
            "output_len": 48,
            "seed": 3,
            "concurrency": [2],
            "requests_per_level": 6,
            "duration_s_per_level": None,
        },
        "model": {
            "architecture": "LlamaForCausalLM",
            "hidden": 2048,
            "layers": 16,
            "dtype": "bfloat16",
        },
        "latency_run": "20261205-validate",
        "twin_line_bytes_per_s": 125e6,
        "levels": levels,
        "baseline": None,
        "notes": [],
    } | more
    report["verdict"] = run.verdict(report)
    return report


def test_the_report_compares_with_a_baseline_and_draws_its_page(
    level: dict[str, Any], tmp_path: Path
) -> None:
    report = _report([level])
    assert report["verdict"] == "passed" and run.failure(report, tmp_path) is None
    (tmp_path / run.REPORT_JSON).write_text(json.dumps(report))
    base = run.load_report(tmp_path)
    same = run.compare([level], base, str(tmp_path), 0.1)
    assert same["regressed"] == [] and same["levels"][0]["change"] == 0
    slower = json.loads(json.dumps(level))
    slower["figures"]["output_tokens_per_s"] = level["figures"]["output_tokens_per_s"] * 0.5
    worse = _report([slower], baseline=run.compare([slower], base, str(tmp_path), 0.1))
    assert worse["verdict"] == "regressed"
    err = run.failure(worse, tmp_path)
    assert err is not None and "-50%" in str(err) and "concurrency 2" in str(err)
    page = html.render(worse)
    assert page.count("<svg") == 3  # tokens/s, latency, twins over time
    assert "REGRESSED" in page and "communication" in page.lower() and "n2" in page
    assert "<script" not in page and "http://127.0.0.1:1" in page


def _layouts_report(levels: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    one = _report(levels)
    rows = [
        {
            "name": "tp2",
            "tp": 2,
            "groups": 1,
            "members": "tp2: n1, n2",
            "plan": {"weight_bytes_per_rank": 3 << 30},
            "switch_s": 0.0,
            "skipped": None,
            "run_id": one["run_id"],
            "report": "/x/report.json",
            "endpoint": one["endpoint"],
            "verdict": one["verdict"],
            "levels": layouts._figures(one),
            "notes": [],
        },
        {
            "name": "tp1x2",
            "tp": 1,
            "groups": 2,
            "members": "tp1x2-1: n1; tp1x2-2: n2",
            "plan": {"weight_bytes_per_rank": 6 << 30},
            "skipped": "does not fit: 6 GiB of weights a rank",
        },
    ]
    report = {
        "schema": run.SCHEMA,
        "kind": layouts.KIND,
        "cluster": "unit",
        "run_id": "20261205-000001-bench-layouts",
        "started": "2026-12-05T00:00:01Z",
        "duration_s": 9.0,
        "inventory": "inventory/sim.ini",
        "sparkctl_version": "0",
        "before": {"layout": "tp2", "groups": "main: n1, n2", "serving": True},
        "workload": one["workload"],
        "model": {"advice": "serve tp2", "weight_bytes": 6 << 30},
        "layouts": rows,
        "restored": {"layout": "main: n1, n2", "ok": True, "seconds": 0.0},
        "error": None,
    } | more
    report["verdict"] = layouts.layouts_verdict(report)
    return report


def test_the_layouts_report_puts_each_layouts_levels_side_by_side(
    level: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The side-by-side rows are the layout's own report's figures; a layout the plan
    refused is a row saying why; a failed restore fails the run."""
    from sparkctl import present  # noqa: PLC0415

    report = _layouts_report([level])
    assert report["verdict"] == "passed"
    (row,) = report["layouts"][0]["levels"]
    f = level["figures"]
    assert row["output_tokens_per_s"] == f["output_tokens_per_s"] > 0
    assert row["ttft_ms"] == f["ttft_ms"] and row["concurrency"] == level["concurrency"]
    assert row["comm_share"] == level["comm"]["a"]["share"]
    page = html.render_layouts(report)
    assert page.count("<svg") == 2  # tokens/s and TTFT by layout
    assert "tp1x2" in page and "does not fit: 6 GiB" in page and "PASSED" in page
    assert "<script" not in page
    present.bench_layouts(report, tmp_path)
    out = capsys.readouterr().out
    assert f"{f['output_tokens_per_s']:.1f}" in out and "does not fit" in out
    broken = _layouts_report(
        [level], restored={"layout": "main", "ok": False, "seconds": 3.0, "message": "boom"}
    )
    assert broken["verdict"] == "failed"
    assert "FAILED: boom" in html.render_layouts(broken)


def test_a_failed_request_fails_the_run_naming_the_level(
    level: dict[str, Any], tmp_path: Path
) -> None:
    bad = json.loads(json.dumps(level))
    bad["figures"] |= {"errors": 2, "completed": 4, "error_samples": ["HTTP 503: overloaded"]}
    report = _report([bad])
    err = run.failure(report, tmp_path)
    assert report["verdict"] == "errors" and err is not None
    assert "concurrency 2: 2 of 6 failed (HTTP 503: overloaded)" in str(err)


def test_a_baseline_that_is_not_a_bench_report_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"schema": 1, "run_id": "x"}')  # a validate report
    with pytest.raises(SparkctlError, match="not a sparkctl bench report") as e:
        run.load_report(tmp_path)
    assert e.value.code == 2 and str(tmp_path / "report.json") in str(e.value)
    with pytest.raises(SparkctlError, match="no such baseline"):
        run.resolve_baseline(str(tmp_path / "missing"), "unit")


def _sparkctl(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    import os  # noqa: PLC0415
    import sys  # noqa: PLC0415

    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ | {"SPARKCTL_STATE_DIR": str(state)},
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--concurrency", "1,0"], "'0' is not a whole number from 1 to 1024"),
        (["--concurrency", "4,4"], "4 is given twice"),
        (["--concurrency", "1;id"], "is not a whole number"),
        (["--output-len", "0"], "--output-len"),
        (["--requests", "4", "--duration", "10"], "not both"),
        (["--baseline", "/nonexistent/bench"], "no such baseline"),
        (["--baseline", "last-good"], "no last-good bench for sim yet"),
        (["--layouts", "tp3"], "tp3 does not split 4 Sparks (1 GPU each)"),
        (["--layouts", "tp4,tp2x2,tp4"], "tp4 is given twice"),
        (["--layouts", "tp2x2", "--baseline", "last-good"], "not both"),
        (["--layouts", "tp2x2", "-e", "sglang_group=x"], "-e sglang_group: --layouts sets"),
    ],
)
def test_bad_input_exits_2_before_any_host_is_contacted(
    args: list[str], said: str, tmp_path: Path
) -> None:
    """Nothing listens at the sim inventory's addresses here: an exit 2 with the reason
    means no host was tried (an attempt would be exit 3 or a lock, after seconds)."""
    p = _sparkctl("bench", "inventory/sim.ini", *args, state=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert said in p.stderr
    assert not (tmp_path / "results" / "sim").exists() or not any(
        d.name.endswith("-bench") for d in (tmp_path / "results" / "sim").iterdir()
    )


def test_the_notes_say_what_a_level_could_not_measure_or_measured_past_the_model(
    level: dict[str, Any],
) -> None:
    unread = json.loads(json.dumps(level))
    for n in unread["nodes"].values():
        n["server_memory_max_bytes"] = None
    unread["comm"]["a"]["share"] = 1.29
    notes = run.level_notes([unread])
    assert "server's own memory cgroup could not be read on n1, n2" in notes[0]
    assert "at concurrency 2 the all-reduces alone" in notes[1] and "upper bound" in notes[1]
    fine = json.loads(json.dumps(level))
    for n in fine["nodes"].values():
        n["server_memory_max_bytes"] = 1 << 30
    fine["comm"]["a"]["share"] = 0.4
    assert run.level_notes([fine]) == []
