"""`sparkctl serve watch`: catch a hung or dead TP group and restart all of its ranks.

A multi-node TP group whose one rank hangs reads "active/running" on every node.
SGLang's own ``--watchdog-timeout`` (300 s, checked every 150 s) fires 300-450 s
after the last progress and only on its own node, and a rank restarted alone
cannot rejoin a group that still runs: every rank of the group must restart
together, as Kubernetes LeaderWorkerSet does by default
(``restartPolicy: RecreateGroupOnPodRestart``, kubernetes-sigs/lws).

The core is a pure decision engine: :class:`Watch` takes one :class:`Reading`
per group per round (no I/O) and returns one :class:`Event`: ``healthy``,
``suspect`` (what it saw), ``restart_group`` (with the evidence) or ``gave_up``
(the circuit breaker is open: stop the group, and why). The rules, with their
sources:

- **Hang, frozen progress.** The decode-token counter does not move while
  requests run or queue (``sglang:num_running_reqs + sglang:num_queue_reqs > 0``)
  for ``frozen_after_s``: the hang signal GB10 users report
  (eugr/spark-vllm-docker #260). With rounds every 15 s and 45 s, a rank hung
  just after a reading is seen at most 60 s later.
  The counter is ``sglang:realtime_tokens_total{mode="decode"}``, which the
  scheduler bumps on every decode step (sglang 0.5.17
  ``srt/observability/metrics_collector.py:884-891``, ``:1229-1243``;
  ``srt/managers/scheduler_components/metrics_reporter.py:703-709``).
  ``sglang:generation_tokens_total`` is the fallback where that counter is
  absent; it grows only when a request *finishes*
  (``metrics_collector.py:1708-1725``, called from
  ``managers/tokenizer_manager.py:2882``), so on its own it would call a long
  generation frozen: then the frozen rule needs the probe to fail as well.
- **No false alarm during a long prefill or under load.** While the prefill
  counter moves (``realtime_tokens_total{mode=~"prefill_compute|prefill_cache"}``,
  bumped per prefill chunk, ``metrics_reporter.py:611-617``; else
  ``sglang:prompt_tokens_total``) the frozen rule does not fire. A probe that
  times out (or gets a 5xx) while prefill or decode advances counts as suspect,
  not as a hang, until that has lasted ``busy_patience_s``: /health answers 503
  during a long chunked prefill (sglang #22511), and a one-token request waits
  behind a deep queue.
- **Hang, failing probe.** The bounded one-token generation through the API
  fails ``probe_failures`` probes in a row. A 4xx (the key, the model name) is
  this side's mistake: suspect, never a restart. A probe that cannot *connect* while
  every rank's unit runs is the controller not reaching the API (serve up's
  rule, sparkctl.serve.up): reported as unreachable, never a restart.
- **Dead rank.** A rank's unit is not active/running, or its NRestarts grew
  (systemd restarted it alone: it cannot rejoin the group).
- **Probe rate.** Never faster than SGLang's 20 s health window
  (``SGLANG_HEALTH_CHECK_TIMEOUT``, sglang 0.5.17
  ``srt/entrypoints/http_server.py:192``): probes that time out pile up on the
  server when polled that often (sglang #35884). :class:`Config` refuses a
  faster interval, and :meth:`Watch.probe_due` says when the next one may go.
- **Restart, backoff, breaker.** A restart is of the whole group; the next one
  waits ``backoff_s`` doubled per restart in the window (capped at
  ``backoff_cap_s``); after ``max_restarts`` within ``window_s`` the engine
  gives up (stop the group, say why) and stays given up until the group is
  found healthy again (an operator fixed it): the stopped group is not probed,
  and the first round that finds every rank's unit running probes at once.
  After a restart, a grace period (the service's start-up time,
  ``sglang_serve_timeout``) before judging again; the first healthy reading
  ends it and says how long the service was down.

The runner (:func:`run_round`, :func:`watch`) gathers a reading with serve's
own pieces (unit states over SSH, serve's one HTTP client), restarts a group
in serve up's order (heads stop first, workers start first) under the
inventory lock, and appends every event to
``<state dir>/results/<cluster>/watch-events.jsonl``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.serve import intent

if TYPE_CHECKING:
    from sparkctl import inventory
    from sparkctl.serve.cluster import Cluster, Group
    from sparkctl.serve.up import UpResult

# SGLang's health window: /health_generate waits this long for scheduler output
# (SGLANG_HEALTH_CHECK_TIMEOUT, default 20; sglang 0.5.17 srt/entrypoints/http_server.py:192).
HEALTH_WINDOW_S = 20.0

# Metric names as sglang 0.5.17 defines them (srt/observability/metrics_collector.py).
REALTIME_TOKENS = "sglang:realtime_tokens_total"  # :884, labels + mode
GENERATION_TOKENS = "sglang:generation_tokens_total"  # :1486, labels + is_streaming
PROMPT_TOKENS = "sglang:prompt_tokens_total"  # :1481, labels + is_streaming
RUNNING_REQS = "sglang:num_running_reqs"  # :269, gauge
QUEUE_REQS = "sglang:num_queue_reqs"  # :275, gauge
DECODE_MODES = frozenset({"decode"})
PREFILL_MODES = frozenset({"prefill_compute", "prefill_cache"})


# ------------------------------------------------------------------ /metrics
@dataclass(frozen=True)
class Metrics:
    """What the head's /metrics says about progress and load.

    ``decode_tokens``/``prefill_tokens``: counters (None: not exposed yet; SGLang
    creates a labelled counter's series at its first increment). ``per_step``:
    the decode counter moves on every decode step (realtime_tokens), not only
    when a request finishes (generation_tokens_total)."""

    decode_tokens: float | None
    prefill_tokens: float | None
    running: float | None
    queued: float | None
    per_step: bool

    @property
    def busy(self) -> bool:
        return (self.running or 0.0) + (self.queued or 0.0) > 0


def _scheduler_sample(labels: Mapping[str, str]) -> bool:
    """One series per scheduler, counted once.

    Only the attention-TP rank 0 scheduler records by default
    (``is_stats_logging_rank``, metrics_collector.py:1067-1070); with
    ``--enable-metrics-for-all-schedulers`` every TP rank reports the same batch,
    so only ``tp_rank="0"`` is read. With priority scheduling a gauge carries its
    total under ``priority=""`` and a breakdown under ``priority="<n>"``
    (metrics_collector.py:1117-1129): the breakdown is not added to the total."""
    return labels.get("tp_rank", "0") == "0" and labels.get("priority", "") == ""


def parse_metrics(text: str) -> Metrics:
    """The counters and gauges the rules read, from Prometheus exposition text.

    Parsed by prometheus_client's own parser. A counter's family is named
    without ``_total`` there (``sglang:realtime_tokens``); its samples keep the
    suffix and come with a ``_created`` sample, which is not a count: samples
    are matched by their own name. Each value is summed over its label sets
    (``mode``, ``is_streaming``, ``dp_rank``, extra labels), one scheduler
    counted once (:func:`_scheduler_sample`)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    sums: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        sums[key] = sums.get(key, 0.0) + value

    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ValueError(f"not Prometheus exposition text: {exc}") from None
    for family in families:
        for s in family.samples:
            if not _scheduler_sample(s.labels) or math.isnan(s.value):
                continue
            if s.name == REALTIME_TOKENS:
                mode = s.labels.get("mode", "")
                if mode in DECODE_MODES:
                    add("decode", s.value)
                elif mode in PREFILL_MODES:
                    add("prefill", s.value)
            elif s.name in (GENERATION_TOKENS, PROMPT_TOKENS, RUNNING_REQS, QUEUE_REQS):
                add(s.name, s.value)
    per_step = "decode" in sums or "prefill" in sums
    return Metrics(
        decode_tokens=sums.get("decode") if per_step else sums.get(GENERATION_TOKENS),
        prefill_tokens=sums.get("prefill") if per_step else sums.get(PROMPT_TOKENS),
        running=sums.get(RUNNING_REQS),
        queued=sums.get(QUEUE_REQS),
        per_step=per_step,
    )


# ------------------------------------------------------------------ readings
class ProbeKind(StrEnum):
    OK = "ok"
    TIMEOUT = "timeout"  # no complete answer by the deadline
    CONNECT = "connect"  # no connection (refused, no route, TLS)
    HTTP = "http"  # an answer, not 200: a server error, 408 or 429
    REFUSED = "refused"  # 4xx: the key or the request is refused (a restart fixes nothing)
    ANSWER = "answer"  # 200, but not a completion


@dataclass(frozen=True)
class Probe:
    """One bounded one-token generation through the API."""

    kind: ProbeKind
    latency_s: float
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.kind is ProbeKind.OK


@dataclass(frozen=True)
class Unit:
    """One rank's unit as ``systemctl show`` read it."""

    node: str
    rank: int
    active: str
    sub: str
    n_restarts: int | None = None
    error: str = ""

    @property
    def running(self) -> bool:
        return self.active == "active" and self.sub == "running"

    @property
    def unreachable(self) -> bool:
        """Not read (SSH failed): nothing is known about the rank."""
        return self.active == "unknown"

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.node})"


@dataclass(frozen=True)
class Reading:
    """One group in one round. ``at``: monotonic seconds; ``wall``: UTC, for people.

    ``probe`` None: no probe this round (not due); ``metrics`` None: /metrics did
    not answer (``metrics_error`` says why); ``fabric``: each twin's up state,
    when the runner read them."""

    group: str
    at: float
    units: tuple[Unit, ...]
    probe: Probe | None = None
    metrics: Metrics | None = None
    metrics_error: str = ""
    fabric: tuple[tuple[str, bool], ...] = ()
    wall: str = ""


# ------------------------------------------------------------------ decisions
class Decision(StrEnum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    RESTART_GROUP = "restart_group"
    GAVE_UP = "gave_up"
    STOPPED = "stopped"  # stopped on purpose with serve down: left alone


@dataclass(frozen=True)
class Event:
    """One decision: what was seen, what was done, when; one JSON line.

    ``action``: none, wait (backoff), restart_group, stop_group, recovered, rejoin
    (a healthy group registered again with the gateway).
    ``downtime_s``: on ``recovered``, from the first sign of the incident to
    the first healthy reading after the restart. ``unreachable``: the
    controller could not see the group (units unread, API not connecting)."""

    group: str
    decision: Decision
    at: float
    action: str
    seen: tuple[str, ...] = ()
    reason: str = ""
    wall: str = ""
    downtime_s: float | None = None
    restarts_in_window: int = 0
    unreachable: bool = False

    def to_json(self) -> str:
        data = asdict(self)
        data["decision"] = self.decision.value
        data["seen"] = list(self.seen)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Event:
        data = json.loads(line)
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"not a watch event: unknown field(s) {sorted(unknown)}")
        data["decision"] = Decision(data["decision"])
        data["seen"] = tuple(data.get("seen", ()))
        return cls(**data)


@dataclass(frozen=True)
class Config:
    """The watchdog's limits; defaults detect a hung rank within 60 s (see the module)."""

    interval_s: float = 15.0
    probe_interval_s: float = 30.0
    probe_timeout_s: float = 15.0
    frozen_after_s: float = 45.0
    probe_failures: int = 2
    busy_patience_s: float = 300.0
    grace_s: float = 900.0
    backoff_s: float = 30.0
    backoff_cap_s: float = 600.0
    max_restarts: int = 3
    window_s: float = 3600.0

    def __post_init__(self) -> None:
        problems = []
        if self.probe_interval_s < HEALTH_WINDOW_S:
            problems.append(
                f"a probe every {self.probe_interval_s:g} s is faster than SGLang's "
                f"{HEALTH_WINDOW_S:g} s health window: probes that time out pile up on the "
                "server (sglang #35884)"
            )
        if not 0 < self.probe_timeout_s < self.probe_interval_s:
            problems.append(
                f"the probe timeout ({self.probe_timeout_s:g} s) must be positive and "
                f"shorter than the probe interval ({self.probe_interval_s:g} s)"
            )
        if not 0 < self.interval_s <= self.frozen_after_s:
            problems.append(
                f"a round every {self.interval_s:g} s cannot see progress frozen for "
                f"{self.frozen_after_s:g} s: at least one round per frozen_after_s"
            )
        if self.probe_failures < 1 or self.max_restarts < 1:
            problems.append("probe_failures and max_restarts are at least 1")
        if self.backoff_s < 0 or self.backoff_cap_s < self.backoff_s:
            problems.append("backoff_s must be >= 0 and backoff_cap_s >= backoff_s")
        if self.window_s <= 0 or self.grace_s <= 0 or self.busy_patience_s < 0:
            problems.append("window_s and grace_s must be positive, busy_patience_s >= 0")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass
class State:
    """What the engine remembers between rounds (JSON, so ``--once`` can resume)."""

    last_at: float | None = None
    decode: float | None = None
    prefill: float | None = None
    progress_at: float | None = None  # the last reading that saw progress (or no load)
    n_restarts: dict[str, int] = field(default_factory=dict)
    probe_streak: int = 0
    excused_since: float | None = None  # probe failing while prefill advances, since
    next_probe_at: float = 0.0
    incident_since: float | None = None
    restarts: list[float] = field(default_factory=list)
    next_restart_at: float = 0.0
    grace_until: float | None = None
    gave_up: str = ""
    restarts_total: int = 0  # every restart decided, ever (sparkctl_watchdog_restarts_total)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> State:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _label(names: Sequence[str]) -> str:
    return ", ".join(names)


@dataclass
class _Findings:
    """One round's findings: ``hang`` warrants a restart (``dead``: its dead ranks),
    ``seen`` makes the round suspect, ``notes`` only inform."""

    hang: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unreachable: bool = False


class Watch:
    """The decision engine of one group: :meth:`decide` once per round."""

    def __init__(self, group: str, config: Config | None = None, state: State | None = None):
        self.group = group
        self.config = config or Config()
        self.state = state or State()

    # ------------------------------------------------------------ probe rate
    def probe_due(self, now: float, units: Sequence[Unit] = ()) -> bool:
        """Whether this round may probe (never within probe_interval_s of the last).
        Given up, only once every rank's unit (``units``, this round's) runs again: a
        probe of the stopped group says nothing, and the first one after an operator's
        serve up goes at once and closes the breaker."""
        if self.state.gave_up and not (units and all(u.running for u in units)):
            return False
        return now >= self.state.next_probe_at

    @property
    def next_probe_at(self) -> float:
        return self.state.next_probe_at

    # ------------------------------------------------------------ the round
    def decide(self, r: Reading) -> Event:
        """One round: the reading judged against the rules and the engine's memory."""
        st = self.state
        if st.last_at is not None and r.at < st.last_at:
            # monotonic time went back: another boot of the controller; start afresh
            self.state = st = State(gave_up=st.gave_up)
        if r.probe is not None:
            st.next_probe_at = r.at + self.config.probe_interval_s
        f = _Findings()
        self._units(r, f)
        moved = self._progress(r, f)
        self._probe(r, f, moved)
        down = [name for name, up in r.fabric if not up]
        if down:
            f.seen.append(f"fabric twin(s) down: {_label(down)} (a restart does not fix a link)")
        st.last_at = r.at
        healthy = not f.hang and not f.seen and not f.unreachable
        return self._verdict(r, healthy, f)

    def _units(self, r: Reading, f: _Findings) -> None:
        st = self.state
        for u in r.units:
            if u.unreachable:
                f.unreachable = True
                f.seen.append(f"{u.label}: its unit could not be read ({u.error or 'no answer'})")
            elif not u.running:
                f.dead.append(f"{u.label}: unit {u.active}/{u.sub}")
            before = st.n_restarts.get(u.node)
            if u.n_restarts is None:
                continue
            if before is not None and u.n_restarts > before and u.running:
                f.dead.append(
                    f"{u.label}: systemd restarted it alone (NRestarts {before} -> "
                    f"{u.n_restarts}); a restarted rank cannot rejoin its group"
                )
            st.n_restarts[u.node] = u.n_restarts
        f.hang += f.dead

    def _progress(self, r: Reading, f: _Findings) -> bool:
        """The frozen-progress rule; whether decode or prefill advanced since the last
        reading."""
        st, m = self.state, r.metrics
        if m is None:
            if r.metrics_error:
                f.notes.append(f"/metrics: {r.metrics_error}")
            return False
        decode_moved = st.decode is not None and m.decode_tokens != st.decode
        prefill_moved = st.prefill is not None and m.prefill_tokens != st.prefill
        if st.progress_at is None or decode_moved or prefill_moved or not m.busy:
            st.progress_at = r.at
        st.decode, st.prefill = m.decode_tokens, m.prefill_tokens
        frozen = r.at - st.progress_at
        load = f"{m.running or 0:g} running, {m.queued or 0:g} queued"
        counter = REALTIME_TOKENS + '{mode="decode"}' if m.per_step else GENERATION_TOKENS
        if prefill_moved and m.busy:
            f.notes.append(f"prefill advancing ({load})")
        if m.busy and frozen > 0:
            what = f"no progress for {frozen:.0f} s with {load} ({counter} {m.decode_tokens})"
            probe_failed = r.probe is not None and not r.probe.ok
            if frozen >= self.config.frozen_after_s and (m.per_step or probe_failed):
                f.hang.append(f"generation frozen: {what}")
            else:
                f.seen.append(what)
        return decode_moved or prefill_moved

    def _probe(self, r: Reading, f: _Findings, moved: bool) -> None:
        st, p = self.state, r.probe
        if p is None:
            return
        if p.ok:
            st.probe_streak, st.excused_since = 0, None
            return
        if p.kind is ProbeKind.REFUSED:
            # a wrong key or model name on this side: no restart fixes it
            f.seen.append(f"the API refused the probe: {p.reason}")
            return
        if moved and p.kind in (ProbeKind.TIMEOUT, ProbeKind.HTTP):
            st.excused_since = st.excused_since if st.excused_since is not None else r.at
        else:
            st.excused_since = None
        waited = r.at - st.excused_since if st.excused_since is not None else None
        if waited is not None and waited < self.config.busy_patience_s:
            f.seen.append(f"probe {p.kind.value} while the engine progresses: {p.reason}")
        elif p.kind is ProbeKind.CONNECT and not f.dead and not f.unreachable:
            f.unreachable = True
            f.seen.append(
                f"probe cannot connect while every rank's unit runs: {p.reason} "
                "(the controller does not reach the API; nothing is restarted)"
            )
        else:
            st.probe_streak += 1
            what = f"generation probe failed {st.probe_streak}x in a row: {p.reason}"
            (f.hang if st.probe_streak >= self.config.probe_failures else f.seen).append(what)

    def _verdict(self, r: Reading, healthy: bool, f: _Findings) -> Event:
        st = self.state
        ev = Event(
            self.group,
            Decision.HEALTHY,
            r.at,
            "none",
            tuple(f.hang + f.seen + f.notes),
            wall=r.wall,
            restarts_in_window=self._recent(r.at),
            unreachable=f.unreachable,
        )
        if st.gave_up:
            if healthy and r.probe is not None:
                # an operator brought it back: the breaker closes
                st.gave_up, st.restarts, st.incident_since = "", [], None
                return replace(ev, reason="healthy again after the watchdog gave up")
            return replace(ev, decision=Decision.GAVE_UP, reason=st.gave_up)
        if st.grace_until is not None:
            return self._in_grace(r, ev, healthy, f)
        if f.hang:
            return self._restart(r, ev, failed=False)
        if healthy:
            st.incident_since = None
            return ev
        st.incident_since = st.incident_since if st.incident_since is not None else r.at
        return replace(ev, decision=Decision.SUSPECT, reason="watching: " + "; ".join(f.seen))

    def _in_grace(self, r: Reading, ev: Event, healthy: bool, f: _Findings) -> Event:
        """After a restart: recovered at the first healthy probe; a rank dead again, or
        no answer by the end of the grace period, is a restart that failed."""
        st = self.state
        assert st.grace_until is not None  # noqa: S101 - the caller checked
        if healthy and r.probe is not None:
            down = r.at - st.incident_since if st.incident_since is not None else None
            self._clear(r.at)
            return replace(
                ev,
                action="recovered",
                downtime_s=None if down is None else round(down, 3),
                reason="the group answers again after the restart",
            )
        if r.at < st.grace_until and not f.dead:
            return replace(
                ev,
                decision=Decision.SUSPECT,
                action="wait",
                reason=f"restarted; judging again when it answers or at the end of the "
                f"grace period ({st.grace_until - r.at:.0f} s left)",
            )
        if not f.dead:
            gone = f"no healthy answer within the {self.config.grace_s:.0f} s grace period"
            ev = replace(ev, seen=(gone, *ev.seen))
        return self._restart(r, ev, failed=True)

    def not_restarted(self, *, attempted: bool) -> None:
        """The runner could not restart the group: the next round judges again at once
        (backoff still applies). ``attempted`` False (another sparkctl run holds the
        lock): nothing was touched and the restart is not counted; True (a unit refused
        to stop or start): it counts toward the breaker, so a group that cannot be
        restarted still ends in ``gave_up``."""
        st = self.state
        if st.restarts and not attempted:
            st.restarts.pop()
        st.grace_until = None

    def _recent(self, now: float) -> int:
        return sum(1 for t in self.state.restarts if now - t < self.config.window_s)

    def _clear(self, now: float) -> None:
        st = self.state
        st.grace_until, st.incident_since = None, None
        st.probe_streak, st.excused_since, st.progress_at = 0, None, now

    def _restart(self, r: Reading, ev: Event, *, failed: bool) -> Event:
        st, cfg = self.state, self.config
        st.incident_since = st.incident_since if st.incident_since is not None else r.at
        recent = self._recent(r.at)
        after = " after a restart that did not bring it back" if failed else ""
        if recent >= cfg.max_restarts:
            st.gave_up = (
                f"{recent} restart(s) within {cfg.window_s:.0f} s did not bring the group "
                "back; the watchdog stops the group and gives up until it is found "
                "healthy again (fix the cause, then sparkctl serve up)"
            )
            st.grace_until = None
            st.next_probe_at = r.at  # the first round with every rank back probes
            return replace(ev, decision=Decision.GAVE_UP, action="stop_group", reason=st.gave_up)
        if r.at < st.next_restart_at:
            return replace(
                ev,
                decision=Decision.SUSPECT,
                action="wait",
                reason=f"restart due{after}; backoff: next restart in "
                f"{st.next_restart_at - r.at:.0f} s",
            )
        st.restarts = [t for t in st.restarts if r.at - t < cfg.window_s] + [r.at]
        st.restarts_total += 1
        st.next_restart_at = r.at + min(
            cfg.backoff_s * 2 ** (len(st.restarts) - 1), cfg.backoff_cap_s
        )
        st.grace_until = r.at + cfg.grace_s
        st.probe_streak, st.excused_since = 0, None
        st.decode = st.prefill = st.progress_at = None
        st.next_probe_at = r.at  # the first round after the restart probes
        return replace(
            ev,
            decision=Decision.RESTART_GROUP,
            action="restart_group",
            reason="every rank of the group restarts together (a rank cannot rejoin a "
            f"running group){after}",
            restarts_in_window=len(st.restarts),
        )


def replay(
    group: str, readings: Iterable[Reading], config: Config | None = None
) -> Iterator[Event]:
    """The engine's events for recorded readings, in order."""
    w = Watch(group, config)
    for r in readings:
        yield w.decide(r)


# ------------------------------------------------------------------ the runner
# What the probe asks: one token, greedy, the served model (a generation, not /health:
# a scheduler that stopped producing output fails it; /health on a rank > 0 is a dummy).
PROBE_PROMPT = "ping"
METRICS_S = 10.0
EVENTS_FILE = "watch-events.jsonl"
STATE_FILE = "watch-state.json"


def events_path(cluster: str) -> Path:
    from sparkctl.paths import state_dir  # noqa: PLC0415

    return state_dir() / "results" / cluster / EVENTS_FILE


def _state_path(cluster: str) -> Path:
    return events_path(cluster).with_name(STATE_FILE)


def units_of(group: Group) -> tuple[Unit, ...]:
    """Every rank's unit, rank order (Cluster.unit_states, one SSH command per node)."""
    states = group.unit_states()
    out = []
    for node in group.members:
        st = states.get(node, {})
        n = str(st.get("NRestarts", ""))
        out.append(
            Unit(
                node,
                group.rank(node),
                str(st.get("ActiveState", "unknown")),
                str(st.get("SubState", "")),
                int(n) if n.isdigit() else None,
                str(st.get("error", "")),
            )
        )
    return tuple(out)


def generation_probe(group: Group, key: str | None, seconds: float) -> Probe:
    """One bounded one-token completion through serve's one HTTP client (no proxy from
    the environment, the inventory's CA, a whole-request deadline); the key goes in a
    header only, never into a message."""
    import httpx  # noqa: PLC0415

    from sparkctl.serve import probe  # noqa: PLC0415

    url = f"{group.base_url}/v1/completions"
    body = {
        "model": group.model_name,
        "prompt": PROBE_PROMPT,
        "max_tokens": 1,
        "temperature": 0,
    }
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    start = time.monotonic()
    try:
        with probe.client(group.tls_ca_file, seconds) as http:
            resp = http.post(url, json=body, headers=headers)
            status, text = resp.status_code, resp.text
    except httpx.HTTPError as exc:
        return _probe_error(exc, seconds, round(time.monotonic() - start, 3))
    took = round(time.monotonic() - start, 3)
    if status != 200:
        refused = 400 <= status < 500 and status not in (408, 429)
        kind = ProbeKind.REFUSED if refused else ProbeKind.HTTP
        return Probe(kind, took, f"HTTP {status}: {text[:120]!r}")
    try:
        data = json.loads(text)
    except ValueError:
        return Probe(ProbeKind.ANSWER, took, f"HTTP 200, not JSON: {text[:120]!r}")
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        return Probe(ProbeKind.ANSWER, took, f"HTTP 200 without choices: {text[:120]!r}")
    return Probe(ProbeKind.OK, took)


def _probe_error(exc: Exception, seconds: float, took: float) -> Probe:
    import httpx  # noqa: PLC0415

    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return Probe(ProbeKind.CONNECT, took, f"{type(exc).__name__}: {str(exc)[:160]}")
    if isinstance(exc, httpx.TimeoutException):
        return Probe(ProbeKind.TIMEOUT, took, f"no answer within {seconds:g} s")
    return Probe(ProbeKind.ANSWER, took, f"{type(exc).__name__}: {str(exc)[:160]}")


def read_metrics(group: Group) -> tuple[Metrics | None, str]:
    """The head's /metrics (open without the key: sglang 0.5.17 srt/utils/auth.py:100),
    parsed; or None and why."""
    import httpx  # noqa: PLC0415

    from sparkctl.serve import probe  # noqa: PLC0415

    url = f"{group.base_url}/metrics"
    try:
        with probe.client(group.tls_ca_file, METRICS_S) as http:
            resp = http.get(url)
    except httpx.HTTPError as exc:
        return None, f"GET {url}: {type(exc).__name__}: {str(exc)[:160]}"
    if resp.status_code != 200:
        return None, f"GET {url}: HTTP {resp.status_code} (is sglang_enable_metrics on?)"
    try:
        return parse_metrics(resp.text), ""
    except ValueError as exc:
        return None, f"GET {url}: {exc}"


def gather(group: Group, key: str | None, w: Watch) -> Reading:
    """One round's reading of ``group``; probes only when the engine says it may."""
    at = time.monotonic()
    wall = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    units = units_of(group)
    metrics, error = read_metrics(group)
    p = generation_probe(group, key, w.config.probe_timeout_s) if w.probe_due(at, units) else None
    if p is not None:
        p = replace(p, reason=group.cluster.redact(p.reason))
    return Reading(group.name, at, units, p, metrics, group.cluster.redact(error), wall=wall)


def restart_group(cluster: Cluster, group: Group, timeout: float) -> UpResult:
    """Every rank of ``group`` stopped (heads first) and started (workers first), then
    waited for as serve up waits: serve up's own functions, under the inventory lock."""
    from sparkctl.lock import inventory_lock  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415

    view = cluster.narrowed(group)
    with inventory_lock(cluster.inv, "serve watch"):
        # out of the gateway first: no new request to a group going down; a broken
        # group's ranks are killed after a short SIGTERM grace (a hung one never exits)
        up.rotate_out(cluster, [group])
        up.stop_units(view, up.BROKEN_GRACE_S)
        followers = up.Followers(view)
        followers.start()
        try:
            up.start_units(view)
            return up.wait_up(view, followers, timeout)
        finally:
            followers.stop()


def stop_group(cluster: Cluster, group: Group) -> None:
    from sparkctl.lock import inventory_lock  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415

    with inventory_lock(cluster.inv, "serve watch"):
        up.rotate_out(cluster, [group])
        up.stop_units(cluster.narrowed(group), up.BROKEN_GRACE_S)


# How long the watchdog waits for the gateway to take a healthy group back.
REJOIN_S = 60.0


def rejoin(cluster: Cluster, group: Group, ev: Event) -> Event | None:
    """A healthy group that is not ready in the gateway's rotation (just restarted, the
    gateway restarted and lost it, or its health checks failed it for good) is
    registered again: an event saying so, or None when it is in rotation (or there
    is no gateway)."""
    from sparkctl.serve import gateway  # noqa: PLC0415

    gw = cluster.gateway()
    if gw is None or ev.decision is not Decision.HEALTHY:
        return None
    now = time.monotonic()
    try:
        current = gw.find(group.base_url)
        if current is not None and current.ready:
            return None
        was = "not registered" if current is None else current.status
        _, took = gateway.join(gw, group.base_url, REJOIN_S)
    except SparkctlError as exc:
        return replace(ev, action="none", at=now, reason=f"gateway: {cluster.redact(exc.message)}")
    return replace(
        ev,
        action="rejoin",
        at=time.monotonic(),
        reason=f"back in the gateway's rotation after {took:.0f} s (it was {was})",
    )


def _open(inv: inventory.Inventory, extravars: Mapping[str, Any] | None) -> Cluster:
    """serve.cluster.open_cluster's Cluster, in one run directory kept for every call
    (``results/<cluster>/serve-watch``): a watchdog called every 15 s by a timer would
    otherwise leave a directory per round."""
    from sparkctl.serve.cluster import open_cluster  # noqa: PLC0415

    run_dir = events_path(inv.cluster).with_name("serve-watch")
    return open_cluster(inv, "serve-watch", extravars, run_dir=run_dir)


def _load_states(path: Path) -> dict[str, State]:
    try:
        data = json.loads(path.read_text())
        return {g: State.from_dict(s) for g, s in data.items() if isinstance(s, dict)}
    except (OSError, ValueError, TypeError):
        return {}


def _save_states(path: Path, watches: Mapping[str, Watch]) -> None:
    from sparkctl.paths import write_atomic  # noqa: PLC0415

    write_atomic(path, json.dumps({g: w.state.to_dict() for g, w in watches.items()}))


@dataclass
class Watched:
    """What ``serve watch`` did: every event, in order; its exit follows from them."""

    events: list[Event] = field(default_factory=list)
    events_file: Path | None = None

    def failure(self) -> SparkctlError | None:
        last: dict[str, Event] = {}
        for ev in self.events:
            last[ev.group] = ev
        hint = f"the events are in {self.events_file}"
        if any(ev.decision is Decision.GAVE_UP for ev in last.values()):
            why = next(ev.reason for ev in last.values() if ev.decision is Decision.GAVE_UP)
            return SparkctlError(f"serve watch gave up: {why}", ExitCode.CHECKS_FAILED, hint=hint)
        if any(ev.unreachable for ev in last.values()):
            return SparkctlError(
                "serve watch: the group could not be seen: "
                + "; ".join(s for ev in last.values() for s in ev.seen)[:600],
                ExitCode.UNREACHABLE,
                hint=hint,
            )
        acted = [
            ev for ev in last.values() if ev.decision not in (Decision.HEALTHY, Decision.STOPPED)
        ]
        if acted:
            return SparkctlError(
                "serve watch: "
                + "; ".join(f"group {ev.group} {ev.decision.value}: {ev.reason}" for ev in acted),
                ExitCode.CHECKS_FAILED,
                hint=hint,
            )
        return None


def watch(
    inv: inventory.Inventory,
    *,
    once: bool,
    interval_s: float = 15.0,
    max_restarts: int = Config.max_restarts,
    window_s: float = Config.window_s,
    backoff_s: float = Config.backoff_s,
    extravars: Mapping[str, Any] | None = None,
    show: Callable[[Event], None] = lambda _ev: None,
) -> Watched:
    """Rounds over every group until gave_up (or one round with ``once``); every event
    appended to the events file and handed to ``show``. ``once`` keeps the engine's
    state in the state dir between calls, so repeated calls see frozen progress.
    ``max_restarts``, ``window_s``, ``backoff_s``: the breaker (:class:`Config`)."""

    try:
        base = Config(  # refused before any host is contacted
            interval_s=interval_s,
            max_restarts=max_restarts,
            window_s=window_s,
            backoff_s=backoff_s,
        )
    except ValueError as exc:
        raise SparkctlError(f"serve watch: {exc}", ExitCode.BAD_INPUT) from None
    cluster = _open(inv, extravars)
    # the grace after a restart: the service's own start-up budget
    timeout = float(cluster.sglang().serve_timeout)
    cfg = replace(base, grace_s=timeout)
    key = cluster.api_key()
    out = events_path(inv.cluster)
    out.parent.mkdir(parents=True, exist_ok=True)
    state_file = _state_path(inv.cluster)
    saved = _load_states(state_file) if once else {}
    groups = cluster.groups()
    watches = {g.name: Watch(g.name, cfg, saved.get(g.name)) for g in groups}
    result = Watched(events_file=out)

    def record(ev: Event) -> None:
        with out.open("a") as fh:
            fh.write(ev.to_json() + "\n")
        result.events.append(ev)
        show(ev)

    while True:
        started = time.monotonic()
        for g in groups:
            w = watches[g.name]
            down = intent.stopped_on_purpose(inv.cluster)
            if down is not None:
                # The operator stopped the service: every rank down is no death. The
                # engine starts afresh once serve up says serving again.
                watches[g.name] = Watch(g.name, cfg)
                record(_stopped_event(g.name, down))
                continue
            ev = w.decide(gather(g, key, w))
            record(ev)
            after = act(cluster, g, w, ev, timeout) or rejoin(cluster, g, ev)
            if after is not None:
                record(after)
        _publish(inv.cluster, watches)
        if once:
            _save_states(state_file, watches)
            return result
        if any(w.state.gave_up for w in watches.values()):
            return result
        time.sleep(max(0.0, cfg.interval_s - (time.monotonic() - started)))


def _stopped_event(group: str, down: intent.Intent) -> Event:
    return Event(
        group,
        Decision.STOPPED,
        time.monotonic(),
        "none",
        reason=f"stopped on purpose ({down.by} at {down.at}): left alone until serve up",
        wall=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def _publish(cluster: str, watches: Mapping[str, Watch]) -> None:
    """The round's figures for node_exporter's textfile collector, when a directory is set
    (sparkctl.metrics: SPARKCTL_TEXTFILE_DIR)."""
    from sparkctl import metrics  # noqa: PLC0415

    metrics.publish_watch(
        cluster, {g: (w.state.restarts_total, bool(w.state.gave_up)) for g, w in watches.items()}
    )


def act(cluster: Cluster, group: Group, w: Watch, ev: Event, timeout: float) -> Event | None:
    """Do what ``ev`` says (restart the group, stop it); an event when it did not work."""
    if ev.action not in ("restart_group", "stop_group"):
        return None
    try:
        if ev.action == "stop_group":
            stop_group(cluster, group)
            return None
        done = restart_group(cluster, group, timeout)
    except SparkctlError as exc:
        if ev.action == "restart_group":
            w.not_restarted(attempted=exc.code is not ExitCode.LOCKED)
        return replace(
            ev,
            decision=Decision.SUSPECT if ev.action == "restart_group" else ev.decision,
            action="none",
            at=time.monotonic(),
            reason=f"{ev.action} failed: {cluster.redact(exc.message)}",
        )
    if done.ok:
        return None
    return replace(
        ev,
        decision=Decision.SUSPECT,
        action="wait",
        at=time.monotonic(),
        reason=f"the restarted group did not come up: {_not_up(done)}",
    )


def _not_up(done: UpResult) -> str:
    """Why a restart did not bring the group up: serve up's message, and each failed
    rank with its phase and what its log says (serve up's signatures)."""
    parts = []
    for node in done.failed:
        r = done.ranks[node]
        titles = [s.title for s in r.signatures if s.fatal] or [s.title for s in r.signatures]
        said = f" ({'; '.join(dict.fromkeys(titles))})" if titles else ""
        parts.append(f"{r.label} in phase {r.phase.value}{said}")
    return done.message + (": " + ", ".join(parts) if parts else "")
