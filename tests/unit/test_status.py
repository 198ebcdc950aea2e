"""sparkctl status's pieces: the one command that reads a node, fingerprints and drift,
the judgement of a node's reading and of generation progress, its metrics.

The node command runs here for real (``sh``, this host's /proc and /sys, the lab's
nvidia-smi stand-in on PATH: nvidia-smi itself needs a GPU); the endpoint and the whole
look run on the lab (tests/lab/test_serve.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl import metrics, node_state, status
from sparkctl.plan import Plan
from sparkctl.remote import Runner
from sparkctl.serve.memory import Memory
from sparkctl.serve.watch import Metrics
from sparkctl_lab.hardware import LabHardware
from sparkctl_lab.standins import STANDINS_DIR
from tests.unit import plans

NODE = "spark1"


def _plan_with_lo() -> Plan:
    def edit(_node: str, part: dict[str, object]) -> None:
        fabric = part["roce_fabric"]
        assert isinstance(fabric, dict)
        fabric["twins"][0]["netdev"] = "lo"

    return plans.plan([NODE], edit=edit)


@pytest.fixture
def local_runner(tmp_path: Path) -> Runner:
    """Commands run by sh on this host, with the lab's nvidia-smi stand-in as nvidia-smi
    (a GB10 at 45 C from its hardware.json and thermal zone)."""
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec python3 {STANDINS_DIR / "nvidia-smi"} "$@"\n')
    smi.chmod(0o755)
    (tmp_path / "hardware.json").write_text(LabHardware().to_json(NODE))
    zone = tmp_path / "sys" / "class" / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "temp").write_text("45000\n")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "SPARKCTL_LAB_HW": str(tmp_path / "hardware.json"),
        "SPARKCTL_LAB_SYSFS": str(tmp_path / "sys"),
    }

    def run(_node: str, command: str, timeout: int) -> tuple[int, str]:
        proc = subprocess.run(
            ["sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        return proc.returncode, proc.stdout + proc.stderr

    return run


def test_one_command_reads_the_node(local_runner: Runner) -> None:
    plan = _plan_with_lo()
    r = node_state.read(plan, [NODE], local_runner)[NODE]
    assert r.reachable and r.kernel == os.uname().release
    assert 0 < r.meminfo["MemAvailable"] <= r.meminfo["MemTotal"]
    assert r.gpu is not None and r.gpu.name == "NVIDIA GB10", r.gpu_error
    assert r.gpu.temperature_c == 45.0 and r.gpu.power_w is not None
    # The stand-in refuses the clock fields (as an nvidia-smi without them would):
    # the GPU's other readings stay, the clock is unknown.
    assert r.gpu.sm_clock_mhz is None and r.gpu.thermal_slowdown is None
    lo, absent = r.links
    want_mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    assert (lo.netdev, lo.mtu) == ("lo", want_mtu) and "rx_bytes" in lo.counters
    assert (absent.operstate, absent.mtu, absent.counters) == ("missing", None, {})
    fp = r.fingerprint()
    assert fp["kernel"] == os.uname().release and fp["driver"] == r.gpu.driver
    assert fp["mtu a"] == str(want_mtu) and fp["mtu b"] == ""


def test_an_unreachable_node_is_named_with_sshs_last_line() -> None:
    r = node_state.parse(
        NODE,
        _plan_with_lo().node(NODE),
        255,
        "ssh: connect to host 10.77.0.11 port 22: No route to host\n",
    )
    assert not r.reachable and r.error.endswith("No route to host")


def test_sections_drop_a_banner_and_keep_each_exit_code() -> None:
    text = (
        "Welcome to Ubuntu 24.04\n"
        f"{node_state.MARK}kernel rc=0\n6.11.0-1016-nvidia\n"
        f"{node_state.MARK}gpu rc=9\nNVIDIA-SMI has failed\n"
        f"{node_state.MARK}link:a rc=2\n"
    )
    assert node_state.sections(text) == {
        "kernel": (0, "6.11.0-1016-nvidia"),
        "gpu": (9, "NVIDIA-SMI has failed"),
        "link:a": (2, ""),
    }


def test_drift_names_what_changed_and_not_what_was_not_read(tmp_path: Path) -> None:
    then = {"spark1": {"kernel": "6.11.0-1016", "mtu a": "9000", "image": "sha256:aa"}}
    node_state_dir = tmp_path / "run"
    node_state_dir.mkdir()
    path = node_state_dir / node_state.FINGERPRINT_FILE
    path.write_text('{"spark1": {"kernel": "6.11.0-1016", "mtu a": "9000", "image": "sha256:aa"}}')
    assert node_state.load_fingerprint(node_state_dir) == then
    now = {"spark1": {"kernel": "6.14.0-1002", "mtu a": "1500", "image": ""}}
    assert [str(d) for d in node_state.drift(then, now)] == [
        "spark1 kernel: 6.11.0-1016 -> 6.14.0-1002",
        "spark1 mtu a: 9000 -> 1500",
    ]
    assert node_state.drift(then, {"spark1": dict(then["spark1"])}) == []
    assert node_state.load_fingerprint(tmp_path) is None


def test_a_passing_runs_fingerprint_is_kept_with_the_images_nccl(
    tmp_path: Path, local_runner: Runner
) -> None:
    readings = node_state.read(_plan_with_lo(), [NODE], local_runner)
    node_state.save_fingerprint(tmp_path, readings, {NODE: "2.28.9+cuda13.0"})
    kept = node_state.load_fingerprint(tmp_path)
    assert kept is not None
    assert kept[NODE]["image nccl"] == "2.28.9+cuda13.0"
    assert kept[NODE]["kernel"] == os.uname().release


# ------------------------------------------------------------------ judging a node
def _reading(**links: node_state.Link) -> node_state.NodeReading:
    gpu = node_state.Gpu("NVIDIA GB10", "580.95.05", 50.0, 90.0, 40.0, None, None)
    return node_state.NodeReading(
        NODE, True, kernel="6.11.0", meminfo={}, gpu=gpu, links=tuple(links.values())
    )


def _link(twin: str, state: str = "up", mtu: int = 9000, **counters: int) -> node_state.Link:
    base = {"carrier_changes": 2, "rx_errors": 0, "tx_errors": 0}
    return node_state.Link(twin, f"dev{twin}", state, mtu, 10000, {**base, **counters})


def _judge(
    r: node_state.NodeReading, before: dict[str, Any], mem: Memory | None = None
) -> tuple[dict[str, object], list[str]]:
    st = status.Status("lab", "now")
    cluster = plans.cluster(
        plans.two_sparks(Path("/nonexistent")), {}, lambda *_: (0, ""), Path("/nonexistent")
    )
    out = status._node(cluster, r, mem, before, st)
    return out, st.problems


def test_a_node_is_judged_against_the_plan_and_the_last_look() -> None:
    healthy = _reading(a=_link("a"), b=_link("b"))
    _, problems = _judge(healthy, {})
    assert problems == [], "the plan's lab values: MTU 9000, 10000 Mb/s"
    broken = _reading(
        a=_link("a", "lowerlayerdown"), b=_link("b", mtu=1500, rx_errors=7, carrier_changes=4)
    )
    before = {"links": {NODE: {"a": _link("a").counters, "b": _link("b").counters}}}
    out, problems = _judge(broken, before, Memory(1 << 30, 128 << 30, "MemAvailable"))
    assert problems == [
        "spark1: memory low: 1.0 GiB of 128.0 GiB available (MemAvailable)",
        "spark1 twin a (deva): lowerlayerdown",
        "spark1 twin b (devb): MTU 1500, the plan sets 9000",
        "spark1 twin b (devb): since the last look carrier_changes +2, rx_errors +7",
    ]
    links = out["links"]
    assert isinstance(links, list)
    assert links[1]["since_last_look"] == {"carrier_changes": 2, "rx_errors": 7}
    # No last look: nothing to compare, and nothing is called news.
    _, first = _judge(_reading(a=_link("a"), b=_link("b", rx_errors=7)), {})
    assert first == []


def test_a_thermal_slowdown_and_a_silent_gpu_are_problems() -> None:
    hot = node_state.Gpu("NVIDIA GB10", "580", 95.0, 95.0, 20.0, 900.0, True)
    r = node_state.NodeReading(NODE, True, gpu=hot)
    assert _judge(r, {})[1] == ["spark1: GPU thermal slowdown active"]
    gone = node_state.NodeReading(NODE, True, gpu=None, gpu_error="nvidia-smi rc 9: failed")
    assert _judge(gone, {})[1] == ["spark1: GPU: nvidia-smi rc 9: failed"]


# ------------------------------------------------------------------ progress
def _m(decode: float | None, running: float, queued: float = 0.0) -> Metrics:
    return Metrics(decode, 0.0, running, queued, per_step=True)


def _none() -> Metrics:
    """/metrics before any request: SGLang creates a labelled counter at its first use."""
    return Metrics(None, None, None, None, per_step=False)


@pytest.mark.parametrize(
    ("first", "second", "busy", "probe", "want"),
    [
        (_m(10, 0), _m(11, 0), False, "ok", "moving"),  # the probe's own token
        (_m(10, 3), _m(90, 3), True, "ok", "moving"),
        (_m(10, 0), _m(10, 0), False, "ok", "idle"),
        (_m(10, 3), _m(10, 3), True, "ok", "frozen"),  # requests in, no token in the window
        # the probe got no answer in its time, and the gauges (updated only after a
        # prefill batch or every 40th decode step) never showed it running
        (_m(10, 0), _m(10, 0), False, "timeout", "frozen"),
        (_m(10, 0), _m(10, 0), False, "http", "idle"),  # a quick 503: nothing was in
        (_m(None, 0), _m(None, 0), False, "ok", "idle"),  # no counter yet, and it answers
        (_none(), _none(), False, "http", "unknown"),  # no counter, and no answer
        (None, None, False, "connect", "unknown"),
    ],
)
def test_progress_is_judged_from_two_reads_around_the_probe(
    first: Metrics | None, second: Metrics | None, busy: bool, probe: str, want: str
) -> None:
    got = status.judge_progress(
        first, second, busy=busy, probe_ok=probe == "ok", probe_timed_out=probe == "timeout"
    )
    assert got == want


# ------------------------------------------------------------------ metrics
def test_status_metrics_are_declared_names_with_their_labels() -> None:
    registry = metrics.status_metrics(
        "lab",
        reachable={"spark1": True, "spark2": False},
        ranks=[("main", "spark1", True), ("main", "spark2", False)],
        probes=[("main", False, 15.0)],
        thermal={"spark1": False},
        at=1.0,
    )
    text = generate_latest(registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert (
        samples[("sparkctl_status_node_reachable", (("cluster", "lab"), ("node", "spark2")))] == 0
    )
    key = ("sparkctl_status_rank_up", (("cluster", "lab"), ("group", "main"), ("node", "spark1")))
    assert samples[key] == 1
    assert samples[("sparkctl_status_probe_success", (("cluster", "lab"), ("group", "main")))] == 0
    assert samples[("sparkctl_status_timestamp_seconds", (("cluster", "lab"),))] == 1.0
