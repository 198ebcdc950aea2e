"""validate --soak: the duration it takes, the verdict on recorded rounds, the readings,
the page.

The verdict is judged on rounds as soak.json records them (read back with
``Round.from_dict``); the readings are read from real nvidia-smi outputs
(tests/fixtures/nvidia-smi/SOURCES.md) and from the lab's nvidia-smi stand-in run
here; the page is drawn with matplotlib as validate's report is.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkctl import present
from sparkctl.collection import tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.remote import Runner
from sparkctl.report import soak_html
from sparkctl.report.model import Thresholds
from sparkctl.report.soak import Round, Soak
from sparkctl.report.soak_html import render_soak
from sparkctl.validate import soak
from sparkctl_lab.hardware import LabHardware
from sparkctl_lab.standins import STANDINS_DIR
from tests.unit.cli_run import run_cli

SMI_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
NODES = ("spark1", "spark2", "spark3", "spark4")
LARGE, SMALL = 16 << 20, 1 << 20
TH = Thresholds(line_rate_gbytes=25.0, min_fraction=0.3, judged_sizes=3, baseline_tolerance=0.1)


# ---------------------------------------------------------------- the duration
@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("1s", 1), ("30m", 1800), ("2h", 7200), ("45m", 2700)]
)
def test_duration_in_seconds_minutes_hours(text: str, seconds: float) -> None:
    assert soak.parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["30", "0s", "00m", "1.5h", "30min", "1h30m", " 30m", "30m ", "30M", "-5m", "", "m", "30 m"],
)
def test_duration_refused_with_exit_2_and_a_hint(text: str) -> None:
    with pytest.raises(SparkctlError) as caught:
        soak.parse_duration(text)
    assert caught.value.code == ExitCode.BAD_INPUT
    assert caught.value.hint is not None and "--soak 30m" in caught.value.hint


@pytest.mark.parametrize(
    ("done", "elapsed", "duration", "expected"),
    [
        (1, 40.0, 1.0, 1),  # shorter than one round: exactly one
        (1, 40.0, 40.0, 1),  # the duration has passed at the round's end
        (1, 40.0, 41.0, 2),  # a second left: one more round, never zero
        (2, 120.0, 600.0, 10),  # 60 s a round, 480 s left: 8 more
        (3, 1900.0, 1800.0, 3),
    ],
)
def test_rounds_expected_and_when_the_soak_stops(
    done: int, elapsed: float, duration: float, expected: int
) -> None:
    assert soak.rounds_expected(done, elapsed, duration) == expected


def test_the_cli_refuses_a_bad_duration_before_reading_the_inventory(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-inventory.ini"
    code, out = run_cli(monkeypatch, capsys, "validate", str(missing), "--soak", "1.5h")
    assert code == ExitCode.BAD_INPUT
    assert "--soak '1.5h' is not a duration" in out and "--soak 90s" in out
    assert str(missing) not in out


def test_the_cli_refuses_soak_with_baseline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ("validate", str(tmp_path / "x.ini"), "--soak", "30m", "--baseline", "last-good")
    code, out = run_cli(monkeypatch, capsys, *args)
    assert code == ExitCode.BAD_INPUT and "--soak takes no --baseline" in out


def test_help_says_a_soak_never_becomes_last_good(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli(monkeypatch, capsys, "validate", "--help")
    assert code == 0
    assert "--soak DURATION" in out and "never becomes" in " ".join(out.split())


# ---------------------------------------------------------------- recorded rounds
def _node(
    name: str,
    temp: float | None = 55.0,
    power: float | None = 40.0,
    clock: float | None = 2400.0,
    reasons: int | None = 0,
) -> dict[str, Any]:
    return {
        "node": name,
        "temperature_c": temp,
        "power_w": power,
        "clock_sm_mhz": clock,
        "clock_event_reasons": reasons,
        "note": "",
    }


def _round(
    k: int,
    busbw: float,
    *,
    outcome: str = "passed",
    wrong: int = 0,
    failed: list[dict[str, Any]] | None = None,
    nodes: dict[str, dict[str, Any]] | None = None,
) -> Round:
    """One round as soak.json records it."""
    by_node = {n: _node(n) for n in NODES}
    by_node.update(nodes or {})
    return Round.from_dict(
        {
            "index": k,
            "started_s": (k - 1) * 60.0,
            "duration_s": 60.0,
            "nccl": [
                {
                    "collective": "all_reduce",
                    "outcome": outcome,
                    "message": "fitted busbw ...",
                    "busbw": {str(SMALL): busbw * 0.6, str(LARGE): busbw},
                    "fitted_busbw": busbw * 1.02,
                    "wrong": wrong,
                    "errors": [],
                }
            ],
            "failed_checks": failed or [],
            "checks": 120,
            "nodes": list(by_node.values()),
            "notes": [],
        }
    )


def test_steady_rounds_are_stable() -> None:
    rounds = [_round(k, v) for k, v in enumerate((20.0, 20.2, 19.9, 20.1, 20.0), start=1)]
    verdict = soak.judge(rounds)
    assert verdict.stable and verdict.problems == [] and verdict.reason() == "stable"
    assert verdict.size == {"all_reduce": LARGE}
    assert verdict.median["all_reduce"] == pytest.approx(20.0)
    cv = verdict.cv["all_reduce"]
    assert cv is not None and 0 < cv < soak.CV_MAX


def test_one_round_is_judged_without_a_variation() -> None:
    verdict = soak.judge([_round(1, 20.0)])
    assert verdict.stable and verdict.cv == {"all_reduce": None}


def test_no_round_is_not_stable() -> None:
    verdict = soak.judge([])
    assert not verdict.stable and verdict.reason() == "unstable: no round finished"


def test_a_drop_in_round_3_is_named_with_its_figure() -> None:
    rounds = [_round(k, v) for k, v in enumerate((20.0, 20.1, 15.0, 20.0, 19.9), start=1)]
    verdict = soak.judge(rounds)
    assert not verdict.stable
    drops = [p for p in verdict.problems if p.kind == "drop"]
    assert [(p.round, p.subject) for p in drops] == [(3, "all_reduce")]
    assert "round 3: all_reduce busbw 15 GB/s at 16 MiB, 25% under the soak's median 20" in (
        drops[0].message
    )
    assert verdict.reason().startswith("unstable: round 3: all_reduce busbw 15 GB/s")
    # the same drop spreads busbw: the variation is named too, with its lowest round
    (variance,) = [p for p in verdict.problems if p.kind == "variance"]
    assert variance.round is None and "lowest round 3: 15 GB/s" in variance.message


def test_a_round_the_gate_failed_is_a_drop_even_at_the_median() -> None:
    rounds = [_round(1, 20.0), _round(2, 20.0, outcome="failed"), _round(3, 20.0)]
    (problem,) = soak.judge(rounds).problems
    assert (problem.kind, problem.round) == ("drop", 2)
    assert problem.message.startswith("round 2: all_reduce below the gate")


def test_a_throttling_node_is_named_with_its_round_and_reading() -> None:
    hot = {"spark3": _node("spark3", temp=91.0, clock=1900.0, reasons=0x40)}
    rounds = [_round(1, 20.0), _round(2, 20.0, nodes=hot), _round(3, 20.0)]
    verdict = soak.judge(rounds)
    throttled = [p for p in verdict.problems if p.kind == "throttling"]
    assert [(p.round, p.subject) for p in throttled] == [(2, "spark3"), (2, "spark3")]
    assert "hw_thermal_slowdown" in throttled[0].message and "91 C" in throttled[0].message
    assert "SM clock 1900 MHz, 21% under round 1's 2400 MHz" in throttled[1].message


def test_a_clock_apart_from_the_first_round_is_throttling_unless_idle() -> None:
    slow = {"spark2": _node("spark2", clock=1800.0, reasons=0)}
    idle = {"spark2": _node("spark2", clock=500.0, reasons=0x1)}
    verdict = soak.judge(
        [_round(1, 20.0), _round(2, 20.0, nodes=idle), _round(3, 20.0, nodes=slow)]
    )
    (problem,) = verdict.problems
    assert (problem.kind, problem.round, problem.subject) == ("throttling", 3, "spark2")
    assert "25% under round 1's 2400 MHz" in problem.message


def test_a_software_power_cap_is_noted_not_failed() -> None:
    capped = {"spark4": _node("spark4", reasons=0x4)}
    verdict = soak.judge([_round(1, 20.0), _round(2, 20.0, nodes=capped)])
    assert verdict.stable
    assert verdict.notes == [
        "round 2: spark4 clock event reasons 0x4 (sw_power_cap) (a software cap; "
        "SM clock 2400 MHz, 55 C, 40.0 W)"
    ]


def test_wrong_results_and_failed_checks_name_round_and_node() -> None:
    failed = [
        {
            "check": "twin_mtu",
            "host": "spark2",
            "subject": "enp1s0f1np1",
            "outcome": "failed",
            "message": "MTU 1500, want 9000",
            "duration_s": 0.1,
        }
    ]
    rounds = [_round(1, 20.0), _round(2, 20.0, wrong=3), _round(3, 20.0, failed=failed)]
    verdict = soak.judge(rounds)
    assert [(p.kind, p.round, p.subject) for p in verdict.problems] == [
        ("errors", 2, "all_reduce"),
        ("errors", 3, "spark2"),
    ]
    assert verdict.problems[0].message == "round 2: all_reduce #wrong 3"
    assert verdict.problems[1].message == (
        "round 3: spark2 twin_mtu enp1s0f1np1 failed: MTU 1500, want 9000"
    )


def test_the_largest_size_is_the_one_every_round_swept() -> None:
    first = _round(1, 20.0)
    # round 2's sweep topped at 1 MiB (less memory free): 16 MiB is not compared
    short = Round.from_dict(
        {
            **first.to_dict(),
            "index": 2,
            "nccl": [{**first.nccl[0].to_dict(), "busbw": {str(SMALL): 12.0}}],
        }
    )
    verdict = soak.judge([first, short])
    assert verdict.size == {"all_reduce": SMALL} and verdict.stable


# ---------------------------------------------------------------- readings
def test_readings_from_real_nvidia_smi_csv() -> None:
    text = (SMI_FIXTURES / "rtxpro6000-570-query-temp-power.csv").read_text()
    r = soak.reading_from("spark1", text, ["temperature.gpu", "power.draw"])
    assert (r.temperature_c, r.power_w, r.clock_sm_mhz) == (25.0, 30.39, None)
    text = (SMI_FIXTURES / "rtxpro6000-570-query-event-reasons.csv").read_text()
    r = soak.reading_from("spark1", text, ["clocks_event_reasons.active"])
    assert r.clock_event_reasons == soak.SW_POWER_CAP
    assert soak.reasons_named(0x4) == "0x4 (sw_power_cap)"


def _standin_runner(tmp_path: Path, calls: list[str]) -> Runner:
    """Commands run through the lab's nvidia-smi stand-in, as on a lab node."""
    hw = tmp_path / "hardware.json"
    hw.write_text(LabHardware().to_json("spark1"))
    zone = tmp_path / "sys" / "class" / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "temp").write_text("47000\n")
    env = {"SPARKCTL_LAB_HW": str(hw), "SPARKCTL_LAB_SYSFS": str(tmp_path / "sys")}

    def run(host: str, command: str, timeout: int) -> tuple[int, str]:
        calls.append(command)
        argv = shlex.split(command)
        assert argv[0] == "nvidia-smi"
        proc = subprocess.run(
            [sys.executable, str(STANDINS_DIR / "nvidia-smi"), *argv[1:]],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", **env},
            timeout=timeout,
            check=False,
        )
        return proc.returncode, proc.stdout + proc.stderr

    return run


def test_a_node_that_does_not_report_clocks_is_read_for_the_rest(tmp_path: Path) -> None:
    calls: list[str] = []
    runner = _standin_runner(tmp_path, calls)
    refused: set[str] = set()
    r = soak.read_node(runner, "spark1", refused)
    assert refused == {"clocks.sm", "clocks_event_reasons.active"}
    assert (r.temperature_c, r.clock_sm_mhz, r.clock_event_reasons) == (47.0, None, None)
    assert r.power_w is not None and r.power_w > 0
    assert r.note == "not reported: clocks.sm, clocks_event_reasons.active"
    # the next round asks only for what the node reports
    calls.clear()
    again = soak.read_node(runner, "spark1", refused)
    assert calls == ["nvidia-smi --query-gpu=temperature.gpu,power.draw --format=csv"]
    assert again.temperature_c == 47.0


def test_the_refused_field_is_read_from_nvidia_smis_message(tmp_path: Path) -> None:
    calls: list[str] = []
    rc, out = _standin_runner(tmp_path, calls)(
        "spark1", "nvidia-smi --query-gpu=clocks.sm --format=csv", 30
    )
    assert rc == 2 and tool_output.nvidia_smi_refused_field(out) == "clocks.sm"
    assert tool_output.nvidia_smi_refused_field("NVIDIA-SMI has failed because ...") is None


# ---------------------------------------------------------------- soak.json, soak.html
def _soak(rounds: list[Round]) -> Soak:
    return Soak(
        run_id="20261203-120000-soak",
        cluster="sim",
        inventory="inventory/sim.ini",
        started="2026-12-03T12:00:00Z",
        sparkctl_version="0",
        hosts=list(NODES),
        thresholds=TH,
        requested_s=300.0,
        rounds=rounds,
        verdict=soak.judge(rounds),
        duration_s=300.0,
    )


def _figures(page: str) -> dict[str, str]:
    return dict(re.findall(r'<figure id="soak-([a-z]+)">(.*?)</figure>', page, re.S))


def test_the_page_has_a_plot_per_series() -> None:
    rounds = [
        _round(k, v, nodes={"spark1": _node("spark1", temp=50.0 + k, power=30.0 + k)})
        for k, v in enumerate((20.0, 20.1, 15.0, 20.0), start=1)
    ]
    page = render_soak(_soak(rounds))
    figures = _figures(page)
    assert set(figures) == {"busbw", "temperature", "power", "clock"}
    assert all(f.count("<svg") == 1 for f in figures.values())
    assert page.count("<svg") == 4 and "<script" not in page
    # one line per node in each node series: its legend names every node
    for name in ("temperature", "power", "clock"):
        assert all(n in figures[name] for n in NODES), name
    assert "threshold 7.5 GB/s (all_reduce)" in figures["busbw"]
    assert "UNSTABLE" in page and "round 3: all_reduce busbw 15 GB/s" in page


def test_a_series_nvidia_smi_does_not_report_is_said_not_plotted() -> None:
    no_clock = {n: _node(n, clock=None, reasons=None) for n in NODES}
    page = render_soak(_soak([_round(1, 20.0, nodes=no_clock), _round(2, 20.0, nodes=no_clock)]))
    assert set(_figures(page)) == {"busbw", "temperature", "power"}
    assert "SM clock: not reported by nvidia-smi." in page and "STABLE" in page


def test_soak_json_round_trips_and_json_output_is_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _soak([_round(1, 20.0), _round(2, 14.0, wrong=1)])
    json_path, html_path = soak_html.write(result, tmp_path)
    data = json.loads(json_path.read_text())
    assert data["verdict"]["outcome"] == "unstable" and len(data["rounds"]) == 2
    assert data["rounds"][1]["nccl"][0]["busbw"][str(LARGE)] == 14.0
    assert Soak.from_dict(data).to_dict() == data
    assert html_path.read_text().count("<svg") == 4
    present.soak(result, tmp_path, as_json=True)
    assert json.loads(capsys.readouterr().out) == data


def test_progress_names_the_round_its_busbw_and_the_hottest_node() -> None:
    x = _round(2, 20.0, nodes={"spark3": _node("spark3", temp=71.0)})
    line = soak.progress_line(x, 5, x.nodes)
    assert line == (
        "round 2/5, 120 s elapsed, all_reduce 20 GB/s at 16 MiB (passed), hottest spark3 71 C"
    )


@pytest.mark.parametrize(("busbw", "code"), [((20.0, 20.1), 0), ((20.0, 12.0), 1)])
def test_the_cli_exits_0_stable_1_unstable_and_prints_soak_json(
    busbw: tuple[float, float],
    code: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command is thin: the soak itself (which needs the nodes) is faked, what the
    command does with its result is not."""
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    asked: list[soak.SoakOptions] = []

    def fake_soak(opts: soak.SoakOptions) -> tuple[Soak, Path]:
        asked.append(opts)
        rounds = [_round(k, v) for k, v in enumerate(busbw, start=1)]
        return _soak(rounds), tmp_path / "run"

    monkeypatch.setattr(soak, "soak", fake_soak)
    inventory = Path(__file__).resolve().parents[2] / "inventory" / "sim.ini"
    got, out = run_cli(
        monkeypatch, capsys, "validate", str(inventory), "--soak", "2m", "-c", "all_reduce"
    )
    assert got == code, out
    (opts,) = asked
    assert (opts.duration_s, list(opts.collectives), opts.nccl) == (120.0, ["all_reduce"], True)
    if code:
        assert "soak unstable: round 2: all_reduce busbw 12 GB/s" in out
        assert str(tmp_path / "run" / "soak.html") in out
    got, out = run_cli(monkeypatch, capsys, "validate", str(inventory), "--soak", "2m", "--json")
    data, end = json.JSONDecoder().raw_decode(out)  # stdout, then what stderr said
    assert got == code and data["verdict"]["outcome"] == ("unstable" if code else "stable")
    assert "report: " in out[end:] and len(data["rounds"]) == 2
