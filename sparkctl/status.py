"""`sparkctl status`: one truthful screen for the whole cluster, and its exit code.

A multi-node TP group with one hung rank reads "active/running" on every node and
its containers read "Up" (sparkrun #252): unit states alone say nothing. status
reads, in one round and in parallel:

- **every node** in one SSH command (:mod:`sparkctl.node_state`): reachable, kernel,
  GPU (temperature, utilisation, power, SM clock and thermal slowdown where
  nvidia-smi reports them), memory as MemAvailable or the headroom of the node's
  memory cgroup where that is less (serve down's reading, :mod:`sparkctl.serve.memory`);
- **every fabric twin**: up, MTU and speed against the plan, and its error, drop and
  carrier-change counters since the last look (kept in ``status-last.json``);
- **every rank's unit**: state, since when, restarts (and restarts since the last look);
- **every group's endpoint**: a bounded one-token generation through the API (the
  watchdog's probe: a scheduler that stopped producing output fails it, where /health
  on a rank > 0 is a dummy 200), and from the head's /metrics the requests running and
  queued and whether generation is progressing: the decode/prefill counters are read
  before and after the probe, at least ``PROGRESS_WINDOW_S`` apart when requests run;
  counters that do not move while requests run or queue is the hang signal GB10 users
  report (eugr/spark-vllm-docker #260);
- **the last validate**: verdict, age, and busbw at its largest judged size against
  last-good's;
- **drift since last-good**: kernel, driver, NCCL (host record and the image's, as
  serve up last saw it), the running image, MTU and speed per twin, the GID index,
  against the fingerprint validate kept beside its last passing run.

Exit codes: 0 healthy, 1 degraded (anything above wrong, a hang included), 3 a node
unreachable. /health is never polled: the probe is a generation, bounded by
``PROBE_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkctl import inventory, metrics, node_state
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import state_dir, write_atomic
from sparkctl.serve import intent, memory
from sparkctl.serve.cluster import Cluster, Group, open_cluster
from sparkctl.serve.watch import Metrics, ProbeKind, generation_probe, read_metrics

PROBE_TIMEOUT_S = 15.0
# With requests running, the counters are read at least this far apart: a decode step
# of a healthy group takes tens of milliseconds, so two seconds without one is a stall.
PROGRESS_WINDOW_S = 2.0
# The memory rule of the monitoring role's files/sparkctl-rules.yml (SparkctlMemoryHeadroomLow).
MEMORY_LOW_FRACTION = 0.05
LAST_LOOK_FILE = "status-last.json"
# A last look older than this is too old to call counter growth "since the last look" news.
LAST_LOOK_MAX_AGE_S = 24 * 3600.0


@dataclass
class GroupStatus:
    group: str
    head: str
    endpoint: str
    probe_ok: bool
    probe_s: float
    probe_reason: str
    running: float | None
    queued: float | None
    progress: str  # idle, moving, frozen, unknown
    metrics_error: str = ""
    ranks: list[dict[str, Any]] = field(default_factory=list)
    # Its place in the gateway's rotation: ready, pending, not_ready, failed,
    # "not registered", or "" without a gateway.
    gateway: str = ""


@dataclass
class Status:
    cluster: str
    at: str
    verdict: str = "healthy"  # healthy, degraded, unreachable
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    groups: list[GroupStatus] = field(default_factory=list)
    validate: dict[str, Any] | None = None
    drift: list[str] = field(default_factory=list)
    took_s: float = 0.0
    # The gateway's endpoint, and why it could not be read ("" when it was).
    gateway: str = ""
    gateway_error: str = ""

    @property
    def exit_code(self) -> ExitCode:
        return {
            "healthy": ExitCode.OK,
            "degraded": ExitCode.CHECKS_FAILED,
            "unreachable": ExitCode.UNREACHABLE,
        }[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def failure(self) -> SparkctlError | None:
        if self.verdict == "healthy":
            return None
        first = self.problems[0] if self.problems else self.verdict
        more = f" (and {len(self.problems) - 1} more above)" if len(self.problems) > 1 else ""
        return SparkctlError(
            f"{self.cluster}: {self.verdict}: {first}{more}",
            self.exit_code,
            hint="sparkctl serve logs for a rank; sparkctl validate after a hardware change",
        )


def last_look_path(cluster: str) -> Path:
    return state_dir() / "results" / cluster / LAST_LOOK_FILE


def _load_last_look(cluster: str, now: float) -> dict[str, Any]:
    try:
        data = json.loads(last_look_path(cluster).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or now - float(data.get("at", 0)) > LAST_LOOK_MAX_AGE_S:
        return {}
    return data


def _save_last_look(cluster: str, data: Mapping[str, Any]) -> None:
    write_atomic(last_look_path(cluster), json.dumps(data, indent=1, sort_keys=True) + "\n")


# ------------------------------------------------------------------ nodes and twins
def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _node(
    cluster: Cluster,
    r: node_state.NodeReading,
    mem: memory.Memory | None,
    before: Mapping[str, Any],
    st: Status,
) -> dict[str, Any]:
    out = r.to_dict()
    if not r.reachable:
        st.problems.append(f"{r.node}: unreachable ({r.error})")
        return out
    if mem is not None:
        out.update(mem_available=mem.available, mem_total=mem.total, mem_source=mem.source)
        if mem.total and mem.available < MEMORY_LOW_FRACTION * mem.total:
            st.problems.append(
                f"{r.node}: memory low: {_gib(mem.available)} of {_gib(mem.total)} "
                f"available ({mem.source})"
            )
    if r.gpu is None:
        st.problems.append(f"{r.node}: GPU: {r.gpu_error}")
    elif r.gpu.thermal_slowdown:
        st.problems.append(f"{r.node}: GPU thermal slowdown active")
    fabric = cluster.plan.node(r.node).roce_fabric
    seen_before = before.get("links", {}).get(r.node, {})
    for i, link in enumerate(r.links):
        where = f"{r.node} twin {link.twin} ({link.netdev})"
        if link.operstate != "up":
            st.problems.append(f"{where}: {link.operstate}")
        if link.mtu is not None and link.mtu != fabric.mtu:
            st.problems.append(f"{where}: MTU {link.mtu}, the plan sets {fabric.mtu}")
        if link.operstate == "up" and link.speed_mbps != fabric.speed_mbps:
            st.problems.append(
                f"{where}: speed {link.speed_mbps or 'unknown'} Mb/s, want {fabric.speed_mbps}"
            )
        was = seen_before.get(link.twin, {})
        grew = {
            k: link.counters[k] - int(was[k])
            for k in node_state.COUNTERS
            if k in link.counters and k in was and link.counters[k] > int(was[k])
        }
        out["links"][i]["since_last_look"] = grew if was else None
        if grew:
            st.problems.append(
                f"{where}: since the last look "
                + ", ".join(f"{k} +{v}" for k, v in sorted(grew.items()))
            )
    return out


# ------------------------------------------------------------------ the endpoint
def _moved(a: Metrics | None, b: Metrics | None) -> bool | None:
    if a is None or b is None:
        return None
    pairs = [(a.decode_tokens, b.decode_tokens), (a.prefill_tokens, b.prefill_tokens)]
    known = [(x, y) for x, y in pairs if x is not None or y is not None]
    if not known:
        return None
    return any(x != y for x, y in known)


def judge_progress(
    first: Metrics | None,
    second: Metrics | None,
    *,
    busy: bool,
    probe_ok: bool,
    probe_timed_out: bool = False,
) -> str:
    """idle, moving, frozen or unknown, from /metrics read before and after the probe
    (``busy``: requests ran or waited at the first read).

    Frozen: requests were in and not one token was made - the load the gauges show, or
    the probe's own request when it got no answer in its time. The probe counts on its
    own because SGLang 0.5.17 updates its running/queued gauges only after a prefill
    batch, every 40th decode step or when idle (scheduler_components/metrics_reporter.py
    ``log_stats`` callers): a group that hangs at the probe's prefill never reports it
    running."""
    moved = _moved(first, second)
    if first is None or second is None:
        return "unknown"
    if moved:
        return "moving"
    if (busy and second.busy) or probe_timed_out:
        return "frozen"
    if moved is None and not probe_ok:
        return "unknown"
    return "idle"


def _endpoint(cluster: Cluster, group: Group, key: str | None) -> GroupStatus:
    start = time.monotonic()
    first, error = read_metrics(group)
    p = generation_probe(group, key, PROBE_TIMEOUT_S)
    busy = first is not None and first.busy
    wait = PROGRESS_WINDOW_S - (time.monotonic() - start)
    if busy and wait > 0:
        time.sleep(wait)
    second, error2 = read_metrics(group) if first is not None else (None, error)
    progress = judge_progress(
        first, second, busy=busy, probe_ok=p.ok, probe_timed_out=p.kind is ProbeKind.TIMEOUT
    )
    return GroupStatus(
        group=group.name,
        head=group.head,
        endpoint=f"{group.base_url}/v1",
        probe_ok=p.ok,
        probe_s=p.latency_s,
        probe_reason=cluster.redact(p.reason),
        running=second.running if second else (first.running if first else None),
        queued=second.queued if second else (first.queued if first else None),
        progress=progress,
        metrics_error=cluster.redact(error or error2),
    )


def _gateway(cluster: Cluster, st: Status, groups: list[Group]) -> None:
    """Each group's place in the gateway's rotation; a group that answers but is not
    ready there, or a gateway that cannot be read, is a problem: clients of the one
    endpoint do not reach that group."""
    from sparkctl.serve import gateway  # noqa: PLC0415

    gw = cluster.gateway()
    if gw is None:
        return
    st.gateway = f"{gw.base_url}/v1"
    try:
        rotation = gateway.rotation(gw, [g.base_url for g in groups])
    except SparkctlError as exc:
        st.gateway_error = cluster.redact(exc.message)
        st.problems.append(f"gateway: {st.gateway_error}")
        return
    for g, e in zip(groups, st.groups, strict=True):
        worker = rotation[g.base_url]
        e.gateway = "not registered" if worker is None else worker.status
        if e.probe_ok and e.gateway != "ready":
            st.problems.append(
                f"group {g.name}: answers, but is {e.gateway} in the gateway's rotation "
                f"({gw.base_url}): sparkctl serve up puts it back"
            )


def _ranks(
    cluster: Cluster,
    group: Group,
    readings: Mapping[str, node_state.NodeReading],
    before: Mapping[str, Any],
    st: Status,
) -> list[dict[str, Any]]:
    out = []
    for node in group.members:
        r = readings[node]
        unit = r.unit
        restarts = unit.get("NRestarts", "")
        was = before.get("restarts", {}).get(node)
        grew = (
            int(restarts) - int(was)
            if restarts.isdigit() and str(was).isdigit() and int(restarts) > int(was)
            else 0
        )
        state = f"{unit.get('ActiveState', 'unknown')}/{unit.get('SubState', '')}"
        out.append(
            {
                "rank": group.rank(node),
                "node": node,
                "state": state if r.reachable else "unknown/unreachable",
                "since": unit.get("ActiveEnterTimestamp", "")
                if unit.get("ActiveState") == "active"
                else unit.get("StateChangeTimestamp", ""),
                "restarts": int(restarts) if restarts.isdigit() else None,
                "restarts_since_last_look": grew,
            }
        )
        if r.reachable and state != "active/running":
            st.problems.append(f"{cluster.label(node)}: unit {cluster.unit} {state}")
        elif grew:
            st.problems.append(f"{cluster.label(node)}: restarted {grew}x since the last look")
    return out


# ------------------------------------------------------------------ validate, drift
def _last_validate(cluster: str) -> Path | None:
    root = state_dir() / "results" / cluster
    runs = sorted(p.parent for p in root.glob("*-validate/report.json")) if root.is_dir() else []
    return runs[-1] if runs else None


def _validate(inv: inventory.Inventory, st: Status, now: float) -> Path | None:
    """The last validate run and last-good's directory (None: no last-good)."""
    from sparkctl import report as report_io  # noqa: PLC0415
    from sparkctl.validate.run import last_good_link  # noqa: PLC0415

    link = last_good_link(inv.cluster)
    good = link.resolve() if link.is_symlink() and link.resolve().is_dir() else None
    last = _last_validate(inv.cluster)
    if last is None:
        st.notes.append(f"never validated: sparkctl validate {inv.path}")
        return good
    try:
        rep = report_io.load(last / "report.json")
    except (SparkctlError, OSError, ValueError) as exc:
        st.notes.append(f"{last / 'report.json'}: not readable ({exc})")
        return good
    started = time.mktime(time.strptime(rep.started, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    busbw = []
    base = None
    if good is not None and good != last:
        try:
            base = report_io.load(good / "report.json")
        except (SparkctlError, OSError, ValueError):
            base = None
    for run in rep.nccl:
        if run.scope != "all" or not run.judged:
            continue
        top = max(run.judged, key=lambda j: j.size)
        item: dict[str, Any] = {"collective": run.collective, "size": top.size}
        item["busbw_gbytes"] = top.busbw
        if base is not None:
            prior = next(
                (b for b in base.nccl if b.scope == "all" and b.collective == run.collective),
                None,
            )
            then = prior.busbw_by_size().get(top.size) if prior else None
            if then:
                item["baseline_gbytes"] = then
                item["change"] = (top.busbw - then) / then
        busbw.append(item)
    st.validate = {
        "run_id": rep.run_id,
        "verdict": rep.verdict,
        "started": rep.started,
        "age_s": round(now - started),
        "last_good": good.name if good else None,
        "busbw": busbw,
    }
    if rep.verdict == "failed":
        st.problems.append(f"the last validate ({rep.run_id}) failed: sparkctl report {last}")
    tol = rep.thresholds.baseline_tolerance
    for item in busbw:
        if item.get("change", 0.0) < -tol:
            st.problems.append(
                f"{item['collective']} busbw {item['busbw_gbytes']:.2f} GB/s is "
                f"{-item['change']:.0%} below last-good's {item['baseline_gbytes']:.2f} GB/s"
            )
    return good


def _drift(
    st: Status, good: Path | None, readings: Mapping[str, node_state.NodeReading], cluster: str
) -> None:
    from sparkctl import nccl_versions  # noqa: PLC0415

    if good is None:
        return
    then = node_state.load_fingerprint(good)
    if then is None:
        st.notes.append(f"last-good ({good.name}) kept no fingerprint: drift not known")
        return
    image = nccl_versions.load(cluster)
    now = {}
    for node, r in readings.items():
        if r.reachable:
            fp = r.fingerprint()
            if image is not None and node in image.versions:
                fp["image nccl"] = image.versions[node]
            now[node] = fp
    for d in node_state.drift(then, now):
        st.drift.append(str(d))
        st.problems.append(f"drift since last-good ({good.name}): {d}")


# ------------------------------------------------------------------ one look
def look(inv: inventory.Inventory, extravars: Mapping[str, Any] | None = None) -> Status:
    """One round of every reading, judged (see the module's docstring)."""
    started = time.monotonic()
    now = time.time()
    st = Status(inv.cluster, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    run_dir = last_look_path(inv.cluster).with_name("status")
    cluster = open_cluster(inv, "status", extravars, run_dir=run_dir)
    before = _load_last_look(inv.cluster, now)
    nodes = cluster.nodes
    groups = cluster.groups()
    try:
        key = cluster.api_key()
    except SparkctlError as exc:  # no key: the probe fails, and this says why
        key = None
        st.notes.append(f"API key: {exc}")
    with ThreadPoolExecutor(max_workers=len(groups) + 1) as pool:
        ends = [pool.submit(_endpoint, cluster, g, key) for g in groups]
        readings = node_state.read(
            cluster.plan, nodes, cluster.runner, {n: cluster.sudo(n) for n in nodes}
        )
        mems = _memories(cluster, readings)
        endpoints = [f.result() for f in ends]
    for n in nodes:
        st.nodes.append(_node(cluster, readings[n], mems.get(n), before, st))
    for g, e in zip(groups, endpoints, strict=True):
        e.ranks = _ranks(cluster, g, readings, before, st)
        where = f"group {g.name}: " if len(groups) > 1 else ""
        if not e.probe_ok:
            st.problems.append(f"{where}{e.endpoint}: generation probe failed: {e.probe_reason}")
        if e.progress == "frozen":
            st.problems.append(
                f"{where}generation frozen: no decode or prefill progress in "
                f"{PROGRESS_WINDOW_S:g}+ s with {e.running:g} running, {e.queued:g} queued"
                if e.running is not None and e.queued is not None
                else f"{where}generation frozen while requests run"
            )
        if e.metrics_error:
            st.notes.append(f"{where}{e.metrics_error}")
        st.groups.append(e)
    _gateway(cluster, st, groups)
    down = intent.stopped_on_purpose(inv.cluster)
    if down is not None:
        st.notes.append(f"the service was stopped on purpose ({down.by} at {down.at})")
    good = _validate(inv, st, now)
    _drift(st, good, readings, inv.cluster)
    if any(not r.reachable for r in readings.values()):
        st.verdict = "unreachable"
    elif st.problems:
        st.verdict = "degraded"
    _save_last_look(
        inv.cluster,
        {
            "at": now,
            "links": {
                n: {lk.twin: lk.counters for lk in r.links}
                for n, r in readings.items()
                if r.reachable
            },
            "restarts": {n: r.unit.get("NRestarts", "") for n, r in readings.items()},
        },
    )
    st.took_s = round(time.monotonic() - started, 2)
    _publish(st)
    return st


def _memories(
    cluster: Cluster, readings: Mapping[str, node_state.NodeReading]
) -> dict[str, memory.Memory]:
    texts = {n: r.cgroup for n, r in readings.items() if r.reachable}
    cgroups = memory.cgroup_memory(cluster, texts)
    out = {}
    for n, r in readings.items():
        if r.reachable and "MemAvailable" in r.meminfo:
            mi = r.meminfo
            reading = memory.Memory(mi["MemAvailable"], mi.get("MemTotal", 0), "MemAvailable")
            out[n] = memory.prefer_cgroup(reading, cgroups.get(n))
    return out


def _publish(st: Status) -> None:
    metrics.publish_status(
        st.cluster,
        reachable={n["node"]: bool(n["reachable"]) for n in st.nodes},
        ranks=[
            (g.group, r["node"], r["state"] == "active/running") for g in st.groups for r in g.ranks
        ],
        probes=[(g.group, g.probe_ok, g.probe_s) for g in st.groups],
        thermal={
            n["node"]: bool(n["gpu"]["thermal_slowdown"])
            for n in st.nodes
            if n.get("gpu") and n["gpu"].get("thermal_slowdown") is not None
        },
    )
