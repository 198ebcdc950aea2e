"""The watchdog's decision engine (sparkctl/serve/watch.py) on recorded reading sequences.

Readings are built round by round on a simulated monotonic clock (rounds every
15 s, as `serve watch` runs them); the engine has no I/O, so each case is what
the runner would have read from a group: unit states, the head's /metrics and,
when due, the one-token probe. The /metrics parser is tested on exposition
text produced by the real prometheus_client, with SGLang's metric definitions
(names, types, label names, multiprocess modes as sglang 0.5.17 declares them
in srt/observability/metrics_collector.py:269-279, :884-891, :1481-1490) and
served the way SGLang serves them (a MultiProcessCollector registry under
PROMETHEUS_MULTIPROC_DIR, srt/utils/common.py:2372-2378).
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl.errors import ExitCode
from sparkctl.inventory import Inventory, Node
from sparkctl.serve import up, watch
from sparkctl.serve.cluster import Cluster
from sparkctl.serve.watch import (
    Config,
    Decision,
    Event,
    Metrics,
    Probe,
    ProbeKind,
    Reading,
    State,
    Unit,
    Watch,
    parse_metrics,
)
from tests.unit import plans
from tests.unit.cli_run import run_cli
from tests.unit.ports import free_port

if TYPE_CHECKING:
    from sparkctl.serve.cluster import Group

NODES = ("spark1", "spark2", "spark3", "spark4")
# SGLang's scheduler labels (metrics_collector.py:1082-1088).
LABELS = {
    "model_name": "toy",
    "engine_type": "unified",
    "tp_rank": "0",
    "pp_rank": "0",
    "moe_ep_rank": "0",
}

# The metrics of SGLang the watchdog reads, declared as sglang 0.5.17 declares them, then
# given values; run in a fresh interpreter because prometheus_client picks its
# multiprocess value class from PROMETHEUS_MULTIPROC_DIR when it is first imported.
_EXPOSITION = textwrap.dedent(
    """
    import os, sys, tempfile
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, multiprocess
    labels = {labels!r}
    prio = {{**labels, "priority": ""}}
    running = Gauge("sglang:num_running_reqs", "The number of running requests.",
                    labelnames=prio.keys(), multiprocess_mode="mostrecent")
    queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                   labelnames=prio.keys(), multiprocess_mode="mostrecent")
    realtime = Counter("sglang:realtime_tokens_total", "Total number of tokens processed.",
                       labelnames=[*labels, "mode"])
    tok = {{"model_name": labels["model_name"]}}
    gen = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                  labelnames=[*tok, "is_streaming"])
    prompt = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                     labelnames=[*tok, "is_streaming"])
    # the total under priority="", a per-priority breakdown beside it (:1117-1129)
    running.labels(**prio).set(3)
    running.labels(**{{**prio, "priority": "1"}}).set(2)
    running.labels(**{{**prio, "priority": "2"}}).set(1)
    queued.labels(**prio).set(4)
    realtime.labels(**labels, mode="decode").inc(1200)
    realtime.labels(**labels, mode="prefill_compute").inc(800)
    realtime.labels(**labels, mode="prefill_cache").inc(64)
    # another TP rank's scheduler (--enable-metrics-for-all-schedulers): the same batch
    realtime.labels(**{{**labels, "tp_rank": "1"}}, mode="decode").inc(1200)
    gen.labels(**tok, is_streaming="true").inc(30)
    gen.labels(**tok, is_streaming="false").inc(12)
    prompt.labels(**tok, is_streaming="false").inc(900)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    sys.stdout.write(generate_latest(registry).decode())
    """
).format(labels=LABELS)


@pytest.fixture(scope="module")
def sglang_exposition() -> str:
    return subprocess.run(
        [sys.executable, "-c", _EXPOSITION],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def test_metrics_parsed_from_sglangs_exposition(sglang_exposition: str) -> None:
    assert 'sglang:realtime_tokens_total{engine_type="unified",mode="decode"' in (sglang_exposition)
    m = parse_metrics(sglang_exposition)
    # the priority breakdown is not added to the total, TP rank 1 is not counted twice
    assert (m.running, m.queued) == (3.0, 4.0)
    assert m.per_step
    assert m.decode_tokens == 1200.0
    assert m.prefill_tokens == 864.0
    assert m.busy


def test_finished_request_counters_when_there_is_no_per_step_counter() -> None:
    """A plain registry (no multiprocess): a counter's family is named without _total
    and carries a _created sample, which is not a count."""
    registry = CollectorRegistry()
    tok = ["model_name", "is_streaming"]
    gen = Counter("sglang:generation_tokens_total", "g", labelnames=tok, registry=registry)
    prompt = Counter("sglang:prompt_tokens_total", "p", labelnames=tok, registry=registry)
    running = Gauge("sglang:num_running_reqs", "r", labelnames=list(LABELS), registry=registry)
    gen.labels("toy", "true").inc(7)
    gen.labels("toy", "false").inc(5)
    prompt.labels("toy", "false").inc(40)
    running.labels(**LABELS).set(0)
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "sglang:generation_tokens" in families  # the parser's name, without _total
    assert "sglang:generation_tokens_created" in text
    m = parse_metrics(text)
    assert (m.decode_tokens, m.prefill_tokens, m.running, m.queued) == (12.0, 40.0, 0.0, None)
    assert not m.per_step and not m.busy


def test_before_any_request_nothing_is_busy() -> None:
    m = parse_metrics("")
    assert m == Metrics(None, None, None, None, per_step=False)


def test_garbage_is_not_metrics() -> None:
    with pytest.raises(ValueError, match="not Prometheus exposition"):
        parse_metrics("<html>this is a login page</html>\n{{{ 1 2 3")


# ------------------------------------------------------------------ the engine
def units(**states: str) -> tuple[Unit, ...]:
    """Every rank active/running unless named: spark3="failed/failed"."""
    out = []
    for rank, node in enumerate(NODES):
        active, _, sub = states.get(node, "active/running").partition("/")
        restarts = int(states.get(f"{node}_restarts", "0"))
        out.append(Unit(node, rank, active, sub, restarts))
    return tuple(out)


OK = Probe(ProbeKind.OK, 0.2)
TIMEOUT = Probe(ProbeKind.TIMEOUT, 15.0, "no answer within 15 s")


def load(decode: float, prefill: float = 0.0, running: float = 0.0, queued: float = 0.0) -> Metrics:
    return Metrics(decode, prefill, running, queued, per_step=True)


class Sim:
    """Rounds every 15 s; the probe goes only when the engine says it may."""

    def __init__(self, config: Config | None = None) -> None:
        self.watch = Watch("g1", config)
        self.t = 1000.0
        self.events: list[Event] = []

    def round(
        self,
        metrics: Metrics | None,
        probe: Probe = OK,
        unit_states: tuple[Unit, ...] | None = None,
    ) -> Event:
        states = unit_states or units()
        r = Reading(
            "g1",
            self.t,
            states,
            probe if self.watch.probe_due(self.t, states) else None,
            metrics,
        )
        ev = self.watch.decide(r)
        self.events.append(ev)
        self.t += 15.0
        return ev


def decisions(events: list[Event]) -> list[Decision]:
    return [e.decision for e in events]


def test_healthy_idle() -> None:
    sim = Sim()
    for _ in range(20):
        sim.round(load(500.0))
    assert set(decisions(sim.events)) == {Decision.HEALTHY}
    probed = [e for e in sim.events if e.at >= 1000.0]
    assert len(probed) == 20


def test_healthy_under_load() -> None:
    sim = Sim()
    for i in range(20):
        sim.round(load(1000.0 + 300 * i, 5000.0 + 100 * i, running=8, queued=3))
    assert set(decisions(sim.events)) == {Decision.HEALTHY}


def frozen_run(sim: Sim) -> tuple[float, Event]:
    """Progress under load, then a rank hangs just after a reading: the counters stop
    while the requests stay running and the probe times out. (hang time, restart)"""
    for i in range(4):
        sim.round(load(100.0 * i, 50.0, running=2))
    hung_at = sim.t - 15.0 + 0.001  # just after the last reading that saw progress
    while True:
        ev = sim.round(load(300.0, 50.0, running=2), probe=TIMEOUT)
        if ev.decision is not Decision.SUSPECT:
            return hung_at, ev
        assert sim.t - hung_at < 600, "the engine never decided"


def test_frozen_rank_restarts_the_group_within_60_s() -> None:
    sim = Sim()
    hung_at, ev = frozen_run(sim)
    assert ev.decision is Decision.RESTART_GROUP
    assert ev.action == "restart_group"
    assert ev.at - hung_at <= 60.0
    assert any("generation frozen" in s or "probe failed" in s for s in ev.seen)
    # never before frozen_after_s of no progress, nor on one failed probe
    assert all(e.decision is Decision.HEALTHY for e in sim.events[:4])


def test_frozen_counters_alone_restart_too() -> None:
    """The probe answering (a scheduler that still takes a tiny request) does not hide
    decode frozen for 45 s with requests running."""
    sim = Sim()
    for i in range(3):
        sim.round(load(100.0 * i, running=2))
    events = [sim.round(load(200.0, running=2)) for _ in range(3)]
    # the last progress was seen at the third round: 45 s later, three rounds on
    assert [e.decision for e in events] == [Decision.SUSPECT] * 2 + [Decision.RESTART_GROUP]
    assert events[-1].at - sim.events[2].at == 45.0
    assert "generation frozen" in events[-1].seen[0]


def test_dead_rank_restarts_the_group() -> None:
    sim = Sim()
    sim.round(load(0.0))
    ev = sim.round(load(0.0), unit_states=units(spark3="failed/failed"))
    assert ev.decision is Decision.RESTART_GROUP
    assert "rank 2 (spark3): unit failed/failed" in ev.seen


def test_a_rank_systemd_restarted_alone_restarts_the_group() -> None:
    sim = Sim()
    sim.round(load(0.0))
    ev = sim.round(load(0.0), unit_states=units(spark2_restarts="1"))
    assert ev.decision is Decision.RESTART_GROUP
    assert any("NRestarts 0 -> 1" in s for s in ev.seen)


def test_long_prefill_is_no_hang() -> None:
    """Prompt tokens advance, decode does not, the probe times out (sglang #22511):
    suspect at most, never a restart, for minutes."""
    sim = Sim()
    sim.round(load(100.0, 1000.0, running=1))
    for i in range(16):  # four minutes
        ev = sim.round(load(100.0, 1000.0 + 8192 * (i + 1), running=1), probe=TIMEOUT)
        assert ev.decision in (Decision.HEALTHY, Decision.SUSPECT), ev
    assert any("while the engine progresses" in s for e in sim.events for s in e.seen)


def test_a_slow_probe_under_heavy_load_is_no_hang() -> None:
    """A deep queue: a one-token request waits past its deadline while decode advances."""
    sim = Sim()
    for i in range(16):
        ev = sim.round(load(1000.0 * i, 500.0, running=64, queued=200), probe=TIMEOUT)
        assert ev.decision is not Decision.RESTART_GROUP, ev


def test_a_refused_probe_is_this_sides_mistake_not_a_hang() -> None:
    sim = Sim()
    refused = Probe(ProbeKind.REFUSED, 0.01, 'HTTP 401: \'{"error": "Unauthorized"}\'')
    for _ in range(10):
        ev = sim.round(load(0.0), probe=refused)
        assert ev.decision is not Decision.RESTART_GROUP
    assert any("refused" in s for s in sim.events[0].seen)


def test_a_probe_failing_past_the_prefill_patience_is_a_hang() -> None:
    sim = Sim(Config(busy_patience_s=60.0))
    sim.round(load(100.0, 1000.0, running=1))
    for i in range(12):
        ev = sim.round(load(100.0, 1000.0 + 10 * (i + 1), running=1), probe=TIMEOUT)
        if ev.decision is Decision.RESTART_GROUP:
            break
    assert ev.decision is Decision.RESTART_GROUP


def test_restart_then_recovery_says_how_long_it_was_down() -> None:
    sim = Sim(Config(grace_s=300.0))
    sim.round(load(0.0))
    first = sim.round(load(0.0), unit_states=units(spark4="failed/failed"))
    assert first.decision is Decision.RESTART_GROUP
    sim.t += 120.0  # the runner's restart and wait
    ev = sim.round(load(0.0))
    assert ev.action == "recovered" and ev.decision is Decision.HEALTHY
    assert ev.downtime_s == pytest.approx(ev.at - first.at)
    assert sim.round(load(0.0)).decision is Decision.HEALTHY


def test_restart_storm_backs_off_then_gives_up_and_stays_given_up() -> None:
    cfg = Config(max_restarts=3, backoff_s=30.0, window_s=3600.0, grace_s=300.0)
    sim = Sim(cfg)
    dead = units(spark3="failed/failed")
    for _ in range(40):
        sim.round(load(0.0), unit_states=dead)
    restarts = [e for e in sim.events if e.decision is Decision.RESTART_GROUP]
    gave_up = [e for e in sim.events if e.decision is Decision.GAVE_UP]
    waits = [e for e in sim.events if e.action == "wait" and "backoff" in e.reason]
    assert len(restarts) == 3
    gaps = [b.at - a.at for a, b in itertools.pairwise(restarts)]
    assert gaps[0] >= 30.0 and gaps[1] >= 60.0  # exponential
    assert waits, "no backoff between restarts"
    assert gave_up and [e.action for e in gave_up].count("stop_group") == 1
    assert sim.events[-1].decision is Decision.GAVE_UP
    assert "3 restart(s)" in gave_up[0].reason
    assert sim.watch.state.restarts_total == 3  # sparkctl_watchdog_restarts_total
    # an operator fixes it: the next healthy reading closes the breaker
    sim.t += 15.0
    assert sim.round(load(0.0)).decision is Decision.HEALTHY


def test_given_up_the_first_round_with_every_rank_back_probes_and_closes_the_breaker() -> None:
    """Given up, the stopped group is not probed; the operator's serve up can come
    seconds after the last round (a CI run did: 10 s), and the very next round probes at
    once, whatever the probe interval, and closes the breaker."""
    cfg = Config(max_restarts=1, backoff_s=0.0, grace_s=60.0)
    sim = Sim(cfg)
    dead = units(spark3="failed/failed")
    while not sim.events or sim.events[-1].decision is not Decision.GAVE_UP:
        sim.round(load(0.0), unit_states=dead)
        assert len(sim.events) < 20
    stopped = units(**dict.fromkeys(("spark1", "spark2", "spark3", "spark4"), "inactive/dead"))
    assert not sim.watch.probe_due(sim.t, stopped)
    assert sim.round(load(0.0), unit_states=stopped).decision is Decision.GAVE_UP
    sim.t -= 5.0  # serve up done 10 s after that round
    assert sim.watch.probe_due(sim.t, units())
    back = sim.round(load(0.0))
    assert back.decision is Decision.HEALTHY, back
    assert back.reason == "healthy again after the watchdog gave up"
    # closed: the probe rate is the usual one again
    assert not sim.watch.probe_due(sim.t, units())


def test_a_restart_that_could_not_be_done_counts_unless_it_was_never_tried() -> None:
    """The lock held by another run: nothing was touched, the restart does not count.
    A unit that refuses to start: it counts, so the breaker still opens."""
    cfg = Config(max_restarts=2, backoff_s=0.0, grace_s=300.0)
    dead = units(spark2="failed/failed")
    locked, refused = Sim(cfg), Sim(cfg)
    for sim, attempted in ((locked, False), (refused, True)):
        for _ in range(8):
            ev = sim.round(load(0.0), unit_states=dead)
            if ev.action == "restart_group":
                sim.watch.not_restarted(attempted=attempted)
    assert Decision.GAVE_UP not in decisions(locked.events)
    assert decisions(locked.events).count(Decision.RESTART_GROUP) == 8
    assert decisions(refused.events)[:3] == [Decision.RESTART_GROUP] * 2 + [Decision.GAVE_UP]


def test_backoff_is_capped() -> None:
    cfg = Config(max_restarts=10, backoff_s=30.0, backoff_cap_s=90.0, grace_s=15.0)
    sim = Sim(cfg)
    for _ in range(80):
        sim.round(load(0.0), unit_states=units(spark1="inactive/dead"))
    restarts = [e.at for e in sim.events if e.decision is Decision.RESTART_GROUP]
    gaps = [b - a for a, b in itertools.pairwise(restarts)]
    assert max(gaps) <= 90.0 + 15.0


def test_unreachable_api_with_running_units_is_never_a_restart() -> None:
    sim = Sim()
    refused = Probe(ProbeKind.CONNECT, 0.01, "ConnectError: [Errno 111] Connection refused")
    for _ in range(10):
        ev = sim.round(None, probe=refused)
        assert ev.decision is not Decision.RESTART_GROUP
    assert any(e.unreachable for e in sim.events)


def test_unread_units_are_unreachable_not_dead() -> None:
    sim = Sim()
    lost = units(spark2="unknown/unreachable")
    for _ in range(6):
        ev = sim.round(load(0.0), unit_states=lost)
        assert ev.decision is Decision.SUSPECT and ev.unreachable


def test_probe_interval_below_sglangs_health_window_is_refused() -> None:
    with pytest.raises(ValueError, match="35884"):
        Config(probe_interval_s=10.0)
    with pytest.raises(ValueError, match="frozen"):
        Config(interval_s=60.0)
    cfg = Config()
    assert cfg.probe_interval_s >= watch.HEALTH_WINDOW_S
    w = Watch("g1", cfg)
    assert w.probe_due(0.0)
    w.decide(Reading("g1", 0.0, units(), OK, load(0.0)))
    assert not w.probe_due(15.0) and w.next_probe_at == 30.0


def test_events_round_trip_as_json_lines() -> None:
    sim = Sim()
    sim.round(load(0.0))
    sim.round(load(0.0), unit_states=units(spark3="failed/failed"))
    sim.t += 60.0
    sim.round(load(0.0))
    for ev in sim.events:
        line = ev.to_json()
        assert "\n" not in line
        assert json.loads(line)["decision"] == ev.decision.value
        assert Event.from_json(line) == ev
    with pytest.raises(ValueError, match="unknown field"):
        Event.from_json(json.dumps({**json.loads(sim.events[0].to_json()), "x": 1}))


def test_state_survives_a_json_round_trip_between_once_calls() -> None:
    """`serve watch --once` keeps the engine's state in a file: frozen progress is seen
    across separate invocations."""

    def rounds() -> Iterator[Reading]:
        t = 0.0
        for i in range(3):
            yield Reading("g1", t, units(), None, load(10.0 * i, running=1))
            t += 15.0
        while True:
            yield Reading("g1", t, units(), None, load(20.0, running=1))
            t += 15.0

    state: State | None = None
    for reading in rounds():
        w = Watch("g1", None, state)
        ev = w.decide(replace(reading, probe=OK if w.probe_due(reading.at) else None))
        state = State.from_dict(json.loads(json.dumps(w.state.to_dict())))
        if ev.decision is not Decision.HEALTHY and ev.decision is not Decision.SUSPECT:
            break
    assert ev.decision is Decision.RESTART_GROUP


def test_cli_help_lists_watch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli(monkeypatch, capsys, "serve", "--help")
    assert code == 0 and "watch" in out
    code, out = run_cli(monkeypatch, capsys, "serve", "watch", "--help")
    assert code == 0 and "--once" in out and "--interval" in out


# ------------------------------------------------------------------ the runner
def _two_groups(tmp_path: Path, calls: list[tuple[str, str]]) -> Cluster:
    """Four Sparks in groups a (spark1, spark2) and b (spark3, spark4); every command a
    node is sent is recorded, in order."""
    nodes = list(NODES)
    inv = Inventory(
        path=tmp_path / "x.ini",
        cluster="sim",
        switch=None,
        ports=(),
        nodes=tuple(Node(n, i, f"10.77.0.{11 + i}", {}) for i, n in enumerate(nodes)),
        hostvars={n: {} for n in nodes},
    )
    members = {"a": ["spark1", "spark2"], "b": ["spark3", "spark4"]}
    base = plans.plan_dict(["spark1", "spark2"])["hosts"]["spark1"]["sglang"]

    def group(node: str, part: dict[str, Any]) -> None:
        i = nodes.index(node)
        name = "ab"[i // 2]
        part["sglang"] = {
            **base,
            "unit": "sparkctl-sglang.service",
            "group": name,
            "group_members": members[name],
            "group_head": members[name][0],
            "group_rank": i % 2,
        }

    lock = threading.Lock()

    def runner(host: str, cmd: str, timeout: int) -> tuple[int, str]:
        with lock:
            calls.append((host, cmd))
        return 0, ""

    return Cluster(
        inv=inv,
        plan=plans.plan(nodes, edit=group),
        run_dir=tmp_path,
        ssh_config=tmp_path / "ssh_config",
        runner=runner,
    )


def test_a_group_restarts_alone_in_serve_ups_order(tmp_path: Path) -> None:
    """serve up's own stop_units/start_units on the cluster narrowed to group b: its head
    stops first and starts last, and group a is not touched."""
    calls: list[tuple[str, str]] = []
    c = _two_groups(tmp_path, calls)
    b = c.groups()[1]
    view = c.narrowed(b)
    assert view.nodes == ["spark3", "spark4"]
    assert (view.heads, view.workers) == (["spark3"], ["spark4"])
    up.stop_units(view)
    up.start_units(view)
    assert {host for host, _ in calls} == {"spark3", "spark4"}
    order = [(host, "stop" if "systemctl stop" in cmd else "start") for host, cmd in calls]
    assert order == [
        ("spark3", "stop"),
        ("spark4", "stop"),
        ("spark4", "start"),
        ("spark3", "start"),
    ]
    assert c.nodes == list(NODES)  # the cluster itself is unchanged


class _Api(BaseHTTPRequestHandler):
    """A head: /metrics open, /v1/completions behind the key; ``hang`` holds the answer."""

    exposition = ""
    hang = threading.Event()
    seen_auth: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        body = self.exposition.encode() if self.path == "/metrics" else b""
        self.send_response(200 if self.path in ("/metrics", "/health") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen_auth.append(self.headers.get("Authorization", ""))
        if self.hang.is_set():
            time.sleep(2.0)
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            status, body = 401, b'{"error": "Unauthorized"}'
        else:
            status, body = 200, json.dumps({"choices": [{"text": "!"}]}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


KEY = "watchKEY-0123456789abcdef"


@dataclass
class _Head:
    base_url: str
    tls_ca_file: str | None = None
    model_name: str = "toy"


@pytest.fixture
def api(sglang_exposition: str) -> Iterator[_Head]:
    _Api.exposition = sglang_exposition
    _Api.hang.clear()
    _Api.seen_auth.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    ).start()
    try:
        yield _Head(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def test_probe_and_metrics_against_a_head(api: _Head) -> None:
    head = cast("Group", api)
    metrics, error = watch.read_metrics(head)
    assert error == "" and metrics is not None and metrics.decode_tokens == 1200.0
    assert watch.generation_probe(head, KEY, 5.0).ok
    refused = watch.generation_probe(head, None, 5.0)
    assert refused.kind is ProbeKind.REFUSED and "401" in refused.reason
    assert KEY not in refused.reason
    _Api.hang.set()
    slow = watch.generation_probe(head, KEY, 0.5)
    assert slow.kind is ProbeKind.TIMEOUT and KEY not in slow.reason


def test_a_closed_port_is_a_connect_failure() -> None:
    head = cast("Group", _Head(f"http://127.0.0.1:{free_port()}"))
    assert watch.generation_probe(head, KEY, 2.0).kind is ProbeKind.CONNECT
    metrics, error = watch.read_metrics(head)
    assert metrics is None and "ConnectError" in error


# ------------------------------------------------------- `sparkctl serve watch` as typed
SIM = Path(__file__).resolve().parents[2] / "inventory" / "sim.ini"


class Ranks:
    """The ranks' side of SSH: unit states (``failed`` names a failed rank until the group
    is restarted), every command that changes a unit kept in order."""

    def __init__(self, failed: str = "", *, stuck: bool = False) -> None:
        self.failed = failed
        self.stuck = stuck  # the failed rank fails again at every start
        self.changes: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, host: str, command: str, timeout: int) -> tuple[int, str]:
        with self.lock:
            if "systemctl restart" in command or "systemctl stop" in command:
                self.changes.append(f"{host}: {'stop' if 'stop' in command else 'start'}")
                self.failed = self.failed if self.stuck else ""
                return 0, ""
            if command.startswith("systemctl show -p ActiveState,SubState"):
                state = (
                    "failed\nSubState=failed" if host == self.failed else "active\nSubState=running"
                )
                return 0, f"ActiveState={state}\nResult=success\nNRestarts=0\n"
        return 1, f"not answered here: {command}"


class NoFollowers:
    """serve up's journal followers without SSH: no lines (the head's /health decides)."""

    def __init__(self, cluster: Cluster) -> None:
        self.lines: queue.Queue[tuple[str, str]] = queue.Queue()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _serve_watch(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    head: _Head,
    ranks: Ranks,
    *extra: str,
) -> tuple[int, list[Event], str]:
    port = int(head.base_url.rsplit(":", 1)[1])

    def cluster(inv: Inventory, extravars: Any = None) -> Cluster:
        local = replace(inv, nodes=tuple(replace(n, mgmt_ip="127.0.0.1") for n in inv.nodes))
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        sglang = {"port": port, "served_model_name": "toy", "serve_timeout": 30}
        return plans.cluster(local, sglang, ranks, run_dir)

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SPARKCTL_SGLANG_API_KEY", KEY)
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    monkeypatch.setattr(watch, "_open", cluster)
    monkeypatch.setattr(up, "Followers", NoFollowers)
    monkeypatch.setattr(up, "POLL_S", 0.05)
    code, out = run_cli(monkeypatch, capsys, "serve", "watch", str(SIM), "--once", "--json", *extra)
    events = [Event.from_json(ln) for ln in out.splitlines() if ln.startswith("{")]
    return code, events, out


def test_serve_watch_once_healthy(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    api: _Head,
) -> None:
    ranks = Ranks()
    code, events, out = _serve_watch(monkeypatch, capsys, tmp_path, api, ranks)
    assert code == 0, out
    assert [e.decision for e in events] == [Decision.HEALTHY]
    assert ranks.changes == []
    saved = tmp_path / "state" / "results" / "sim" / "watch-events.jsonl"
    assert [Event.from_json(ln) for ln in saved.read_text().splitlines()] == events
    assert (saved.parent / "watch-state.json").is_file()
    assert _Api.seen_auth == [f"Bearer {KEY}"]  # one probe, with the key in its header
    assert KEY not in saved.read_text() and KEY not in out


def test_serve_watch_once_restarts_a_group_with_a_dead_rank(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    api: _Head,
) -> None:
    ranks = Ranks(failed="spark3")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    monkeypatch.setenv("SPARKCTL_TEXTFILE_DIR", str(textfiles))
    code, events, out = _serve_watch(monkeypatch, capsys, tmp_path, api, ranks)
    assert code == 1, out
    assert [e.decision for e in events] == [Decision.RESTART_GROUP], out
    # the round's figures for node_exporter's textfile collector
    prom = (textfiles / "sparkctl-watch-sim.prom").read_text()
    assert 'sparkctl_watchdog_restarts_total{cluster="sim",group="main"} 1.0' in prom, prom
    assert 'sparkctl_watchdog_gave_up{cluster="sim",group="main"} 0.0' in prom, prom
    assert "rank 2 (spark3): unit failed/failed" in events[0].seen
    # serve up's order: the head stops first, the workers start first, every rank
    stops = [c for c in ranks.changes if c.endswith("stop")]
    starts = [c for c in ranks.changes if c.endswith("start")]
    assert ranks.changes == stops + starts and len(stops) == len(starts) == 4
    assert stops[0] == "spark1: stop" and starts[-1] == "spark1: start"
    # the next call: the group answers, and the event says how long it was down
    code, events, out = _serve_watch(monkeypatch, capsys, tmp_path, api, ranks)
    assert code == 0, out
    assert (events[0].action, events[0].decision) == ("recovered", Decision.HEALTHY)
    assert events[0].downtime_s is not None and events[0].downtime_s > 0


def test_serve_watch_gives_up_on_a_rank_that_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    api: _Head,
) -> None:
    """--max-restarts 1: the one restart fails naming the rank; the next call opens the
    breaker, stops every rank and exits 1; a further call restarts nothing."""
    ranks = Ranks(failed="spark3", stuck=True)
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    monkeypatch.setenv("SPARKCTL_TEXTFILE_DIR", str(textfiles))
    code, events, out = _serve_watch(
        monkeypatch, capsys, tmp_path, api, ranks, "--max-restarts", "1"
    )
    assert code == 1, out
    assert [(e.decision, e.action) for e in events] == [
        (Decision.RESTART_GROUP, "restart_group"),
        (Decision.SUSPECT, "wait"),
    ], out
    assert "did not come up: a rank's unit stopped: rank 2 (spark3) in phase" in events[1].reason
    ranks.changes.clear()
    code, events, out = _serve_watch(
        monkeypatch, capsys, tmp_path, api, ranks, "--max-restarts", "1"
    )
    assert code == 1 and "serve watch gave up" in out, out
    assert [(e.decision, e.action) for e in events] == [(Decision.GAVE_UP, "stop_group")], out
    assert sorted(ranks.changes) == [f"spark{i}: stop" for i in range(1, 5)]
    prom = (textfiles / "sparkctl-watch-sim.prom").read_text()
    assert 'sparkctl_watchdog_gave_up{cluster="sim",group="main"} 1.0' in prom, prom
    ranks.changes.clear()
    code, events, out = _serve_watch(
        monkeypatch, capsys, tmp_path, api, ranks, "--max-restarts", "1"
    )
    assert code == 1 and [(e.decision, e.action) for e in events] == [(Decision.GAVE_UP, "none")], (
        out
    )
    assert ranks.changes == []


def test_serve_watch_refuses_limits_out_of_range(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag, value in (("--max-restarts", "0"), ("--restart-window", "5"), ("--backoff", "-1")):
        code, out = run_cli(monkeypatch, capsys, "serve", "watch", str(SIM), flag, value)
        assert code == ExitCode.BAD_INPUT, (flag, out)
        assert flag in out, out


def test_serve_watch_leaves_a_service_stopped_with_serve_down_alone(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    api: _Head,
) -> None:
    """Every rank down after `serve down` is the operator's will, not a death: no restart,
    exit 0. Once serve up says serving again, a dead rank is restarted as before."""
    from sparkctl.serve import intent  # noqa: PLC0415

    ranks = Ranks(failed="spark3")
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    intent.record("sim", serving=False, by="serve down")
    code, events, out = _serve_watch(monkeypatch, capsys, tmp_path, api, ranks)
    assert code == 0, out
    assert [e.decision for e in events] == [Decision.STOPPED], out
    assert "serve down" in events[0].reason and ranks.changes == []
    intent.record("sim", serving=True, by="serve up")
    code, events, out = _serve_watch(monkeypatch, capsys, tmp_path, api, ranks)
    assert code == 1 and [e.decision for e in events] == [Decision.RESTART_GROUP], out


def test_serve_watch_refuses_an_interval_too_long_to_see_a_hang(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli(monkeypatch, capsys, "serve", "watch", str(SIM), "--interval", "90")
    assert code == ExitCode.BAD_INPUT, out
    assert "frozen" in out
