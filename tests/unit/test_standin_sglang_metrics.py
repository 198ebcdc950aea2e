"""The SGLang stand-in's /metrics move when sglang 0.5.17's move, and serve watch reads them.

A two-rank group: TP0's engine in this process (the stand-in's Engine and
App.metrics, the body of its /metrics), the other rank a real process running
the stand-in's worker loop at the far end of a socket pair, as on a node. The
release's timing (paths under sglang/srt/, cited in the stand-in's engine.py):
prompt/generation token totals move when a request finishes
(tokenizer_manager.py:2882), ``realtime_tokens_total{mode="decode"}`` after
every decode step (scheduler_components/metrics_reporter.py:704-709), the
running/queued gauges at the scheduler's reports (metrics_reporter.py:652-656,
:728, :867-872). A rank stopped with SIGSTOP stops every step of the group (each
all-reduce waits for every rank), so every counter stops, and serve watch's
engine, fed the stand-in's own /metrics text at built timestamps (no waiting
for 45 s), restarts the group 45 s after the last progress, not after its
300 s long-prefill patience.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl.serve import watch
from sparkctl_lab.standins.sglang import engine as standin_engine
from sparkctl_lab.standins.sglang import launch_server as ls
from sparkctl_lab.standins.sglang.engine import Engine, Model, Sampling
from sparkctl_lab.standins.sglang.rendezvous import Node
from sparkctl_lab.standins.sglang.server import App

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "lab" / "sparkctl_lab" / "standins"
HIDDEN, LAYERS = 64, 1
PROMPT = "tell me a long story about the cluster"
# The worker rank as launch_server runs it on a node (engine is None -> worker_loop), on the
# socket inherited from the test instead of the rendezvous' link.
WORKER = f"""
import socket, sys
from sglang.engine import Model, worker_loop
from sglang.rendezvous import Node
link = socket.socket(fileno=int(sys.argv[1]))
node = Node(args={{"tp_size": 2}}, rank=1, nnodes=2, dist_host="", dist_port=0, timeout=10,
            links={{0: link}})
worker_loop(node, Model(path="toy", hidden_size={HIDDEN}, num_layers={LAYERS}))
"""
SCHEDULER = {"model_name": "toy", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
WAIT_S = 20.0  # bound of every wait for the engine (never an assertion on time)


@dataclass
class Group:
    engine: Engine
    app: App
    worker: subprocess.Popen[bytes]

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """The /metrics body, parsed by prometheus_client: (sample, labels) -> value."""
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(self.app.metrics())
            for s in fam.samples
        }

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample of ``name`` whose labels include ``labels``, or None."""
        found = [
            v
            for (n, ls_), v in self.samples().items()
            if n == name and set(labels.items()) <= set(ls_)
        ]
        assert len(found) <= 1, (name, labels, found)
        return found[0] if found else None

    def decode_tokens(self) -> float | None:
        return self.value("sglang:realtime_tokens_total", mode="decode")


def _args(decode_log_interval: int) -> dict[str, Any]:
    return ls.parse_args(
        [
            "--model-path",
            "/models/toy",
            "--served-model-name",
            "toy",
            "--tp-size",
            "2",
            "--nnodes",
            "2",
            "--enable-metrics",
            "--decode-log-interval",
            str(decode_log_interval),
        ]
    )


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[Group]:
    interval = getattr(request, "param", 1)
    head, far = socket.socketpair()
    env = {**os.environ, "PYTHONPATH": str(STANDIN), "PYTHONDONTWRITEBYTECODE": "1"}
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(far.fileno())], pass_fds=[far.fileno()], env=env
    )
    far.close()
    args = _args(interval)
    node = Node(
        args=args,
        rank=0,
        nnodes=2,
        dist_host="",
        dist_port=0,
        timeout=10,
        links={1: head},
        world={1: {"host": "spark-2", "nccl": ("127.0.0.2", 0)}},
    )
    model = Model(path="/models/toy", hidden_size=HIDDEN, num_layers=LAYERS)
    engine = Engine(node, model, total_tokens=100_000)
    engine.start()
    engine.status = "Up"
    try:
        yield Group(engine, App(engine, args, model, available=100.0), worker)
    finally:
        worker.send_signal(signal.SIGCONT)
        worker.kill()
        worker.wait(timeout=10)
        head.close()


class Stream:
    """A generation read by the test. The scheduler runs ahead of the reader, so ``received``
    outputs only bound what ran from below: the prefill's token plus ``received - 1`` decode
    steps advanced, ``received - 2`` of them reported (each step reports after its tokens go
    out, batch_result_processor.py:903-913)."""

    def __init__(self, g: Group, prompt: str, max_new: int) -> None:
        self.gen = g.engine.generate(prompt, Sampling(max_new=max_new, ignore_eos=True))
        self.received = 0

    def take(self, n: int) -> None:
        for _ in range(n):
            _, done = next(self.gen)
            assert done is None, "the generation ended early"
            self.received += 1

    def past(self, decode_steps: float | None) -> None:
        """Read until more than ``decode_steps`` decode steps are surely reported."""
        self.take(max(0, int(decode_steps or 0) + 3 - self.received))


def _stop(g: Group) -> str:
    """SIGSTOP the worker rank; /metrics once nothing moves any more (the step in flight
    may still complete); bounded."""
    g.worker.send_signal(signal.SIGSTOP)
    _, status = os.waitpid(g.worker.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    return _steady(g)


def _steady(g: Group) -> str:
    deadline = time.monotonic() + WAIT_S
    last = g.app.metrics()
    while True:
        time.sleep(0.3)
        now = g.app.metrics()
        if now == last:
            return now
        assert time.monotonic() < deadline, "the counters kept moving with a rank stopped"
        last = now


def _decode(text: str) -> float | None:
    return watch.parse_metrics(text).decode_tokens


def test_an_in_flight_request_moves_the_step_counters_not_the_request_totals(
    group: Group,
) -> None:
    g = group
    assert g.app.metrics() == ""  # nothing set yet: no series at all (multiprocess mode)
    long = Stream(g, PROMPT, 100_000)
    long.take(3)
    assert g.value("sglang:realtime_tokens_total", mode="prefill_compute") == len(PROMPT.split())

    paused = _stop(g)  # the group holds still mid-request
    assert g.value("sglang:num_running_reqs", **SCHEDULER) == 1
    assert g.value("sglang:num_queue_reqs", **SCHEDULER) == 0
    assert (_decode(paused) or 0) >= 1
    for name in ("prompt_tokens_total", "generation_tokens_total", "num_requests_total"):
        assert g.value(f"sglang:{name}") is None, f"{name} moved before any request finished"
    g.worker.send_signal(signal.SIGCONT)
    long.past(_decode(paused))
    assert (g.decode_tokens() or 0) > (_decode(paused) or 0)  # a counter of steps

    # a request that finishes counts once, at its end; the one still running does not
    short = list(g.engine.generate("short", Sampling(max_new=12, ignore_eos=True)))
    assert short[-1][1] == {"type": "length", "length": 12}
    done = {"model_name": "toy", "engine_type": "unified", "is_streaming": "false"}
    assert g.value("sglang:prompt_tokens_total", **done) == 1
    assert g.value("sglang:generation_tokens_total", **done) == 12
    assert g.value("sglang:num_requests_total", **done) == 1
    long.gen.close()


@pytest.mark.parametrize("group", [40], indirect=True)
def test_gauges_wait_for_the_decode_log_interval(group: Group) -> None:
    """With the release's default interval (40 decode steps) the running gauge keeps the
    prefill's report (the batch before the request joined: 0) until the 40th decode step,
    while realtime tokens move on every step."""
    g = group
    long = Stream(g, PROMPT, 100_000)
    long.take(1)
    for _ in range(2):
        paused = _stop(g)
        steps = _decode(paused) or 0
        assert g.value("sglang:num_running_reqs") == (1 if steps >= 40 else 0), steps
        g.worker.send_signal(signal.SIGCONT)
        long.past(41)
    long.gen.close()


def test_health_while_busy_runs_no_request_and_fails_with_a_rank_stopped(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/health on a busy scheduler answers after its next batch instead of running a request
    of its own (scheduler.py:1843-1849): no prefill counted; with a rank stopped no batch
    ends and /health fails (its window shortened from SGLANG_HEALTH_CHECK_TIMEOUT's 20 s)."""
    g = group
    long = Stream(g, PROMPT, 100_000)
    long.take(3)
    prefill = g.value("sglang:realtime_tokens_total", mode="prefill_compute")
    assert g.engine.health()
    assert g.value("sglang:realtime_tokens_total", mode="prefill_compute") == prefill
    monkeypatch.setattr(standin_engine, "HEALTH_CHECK_TIMEOUT", 1)
    _stop(g)
    assert not g.engine.health()
    long.gen.close()


def _probe(g: Group) -> queue.Queue[Any]:
    """serve watch's probe: a one-token completion of "ping"; its outcome lands in the queue."""
    out: queue.Queue[Any] = queue.Queue()

    def run() -> None:
        try:
            out.put(list(g.engine.generate(watch.PROBE_PROMPT, Sampling(max_new=1))))
        except Exception as exc:  # the outcome is what the test reads
            out.put(exc)

    threading.Thread(target=run, daemon=True).start()
    return out


def test_a_stopped_rank_freezes_the_group_and_watch_restarts_it_at_45_s(group: Group) -> None:
    g = group
    long = Stream(g, PROMPT, 100_000)
    long.take(3)
    ok = _probe(g).get(timeout=WAIT_S)  # a probe while healthy is answered
    assert isinstance(ok, list) and ok[-1][1] is not None
    at_0 = g.app.metrics()
    long.past(_decode(at_0))
    at_15 = g.app.metrics()
    assert (_decode(at_15) or 0) > (_decode(at_0) or 0)

    long.past(_decode(at_15))  # the group runs on after the 15 s reading until the stop
    frozen = _stop(g)
    probe = _probe(g)  # serve watch's next probe reaches the frozen group
    assert _steady(g) == frozen, "the probe's arrival moved a metric"
    assert probe.empty(), "a probe was answered with a rank stopped"
    parsed = watch.parse_metrics(frozen)
    assert parsed.per_step and parsed.busy

    units = (
        watch.Unit("spark-1", 0, "active", "running", 0),
        watch.Unit("spark-2", 1, "active", "running", 0),  # SIGSTOP: systemd sees it running
    )
    timeout = watch.Probe(watch.ProbeKind.TIMEOUT, 15.0, "no answer within 15 s")
    rounds = [
        (0.0, at_0, watch.Probe(watch.ProbeKind.OK, 0.1)),
        (15.0, at_15, None),
        (30.0, frozen, timeout),
        (45.0, frozen, None),
        (60.0, frozen, timeout),
        (75.0, frozen, None),
    ]
    readings = [
        watch.Reading("g", at, units, probe=p, metrics=watch.parse_metrics(text))
        for at, text, p in rounds
    ]
    events = list(watch.replay("g", readings))
    decisions = [(ev.at, ev.decision.value) for ev in events]
    restarts = [ev for ev in events if ev.decision is watch.Decision.RESTART_GROUP]
    assert restarts, decisions
    # the group ran on after the 15 s reading until the stop: the 30 s reading is the last
    # to see progress. Restarted frozen_after_s (45 s) after it, long before the long-prefill
    # patience (busy_patience_s, 300 s), which a probe's arrival extended in the old stand-in.
    cfg = watch.Config()
    assert restarts[0].at == 30.0 + cfg.frozen_after_s < cfg.busy_patience_s, decisions
    assert any("generation frozen" in seen for seen in restarts[0].seen), restarts[0].seen

    # the stop was the cause: the group goes on when the rank does
    g.worker.send_signal(signal.SIGCONT)
    long.past(_decode(frozen))
    assert (g.decode_tokens() or 0) > (_decode(frozen) or 0)
    assert probe.get(timeout=WAIT_S)[-1][1] is not None
    long.gen.close()
