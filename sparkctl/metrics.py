"""sparkctl's own figures as Prometheus metrics, for node_exporter's textfile collector.

Every metric sparkctl writes is declared once in :data:`METRICS` (name, type, help,
labels, the command that writes it); docs/monitoring.md lists the same table and a
unit test holds the two equal. Names follow https://prometheus.io/docs/practices/naming/:
one ``sparkctl_`` prefix, base units (seconds, bytes, bytes per second, ratios 0..1),
``_total`` only on counters, ``_timestamp_seconds`` for "when".

Files are written with prometheus-client's ``write_to_textfile``: it writes
``<path>.<pid>.<thread id>`` in the same directory and ``os.rename``\\ s it over
``<path>`` (prometheus_client/exposition.py, ``write_to_textfile``), so the collector,
which reads only ``*.prom`` (node_exporter collector/textfile.go), never sees a partial
file. One file per command and cluster (``sparkctl-<command>-<cluster>.prom``): every
series has one writer (node_exporter drops a series that two files carry).

Where: ``SPARKCTL_TEXTFILE_DIR`` on the controller (the node exporter's
``--collector.textfile.directory``, ``/var/lib/prometheus/node-exporter`` on Debian and
Ubuntu). Unset or empty: nothing is written. A file that cannot be written is a warning,
never a failed command.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkctl import console
from sparkctl.plan import Plan
from sparkctl.report.model import Report

TEXTFILE_ENV = "SPARKCTL_TEXTFILE_DIR"
GB = 1e9  # nccl-tests' GB/s, and the report's, are 10^9 bytes per second
VERDICTS = ("passed", "failed", "not_judged")

Kind = Literal["gauge", "counter"]
Writer = Literal["validate", "serve verify", "status", "serve watch"]


@dataclass(frozen=True)
class Spec:
    """One metric: what docs/monitoring.md's table says of it."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    writer: Writer
    help: str


def _g(name: str, labels: str, writer: Writer, help: str) -> Spec:
    return Spec(name, "gauge", tuple(labels.split()), writer, help)


METRICS: tuple[Spec, ...] = (
    # -- validate: sparkctl-validate-<cluster>.prom
    _g(
        "sparkctl_validate_verdict",
        "cluster verdict",
        "validate",
        "1 for the last validate run's verdict, 0 for the other verdicts "
        "(passed, failed, not_judged)",
    ),
    _g(
        "sparkctl_validate_timestamp_seconds",
        "cluster",
        "validate",
        "When the last validate run finished (Unix time)",
    ),
    _g(
        "sparkctl_validate_duration_seconds",
        "cluster",
        "validate",
        "How long the last validate run took",
    ),
    _g(
        "sparkctl_validate_checks_failed",
        "cluster node",
        "validate",
        "Checks that failed on each node (node=cluster: the checks across nodes)",
    ),
    _g(
        "sparkctl_validate_busbw_bytes_per_second",
        "cluster collective",
        "validate",
        "Fitted bus bandwidth of the all-node nccl-tests run",
    ),
    _g(
        "sparkctl_validate_busbw_threshold_bytes_per_second",
        "cluster collective",
        "validate",
        "The bus bandwidth the gate requires (absent: the collective is not gated)",
    ),
    _g(
        "sparkctl_validate_busbw_baseline_ratio",
        "cluster collective",
        "validate",
        "Lowest busbw / baseline busbw over the compared sizes (with --baseline)",
    ),
    _g(
        "sparkctl_validate_baseline_tolerance_ratio",
        "cluster",
        "validate",
        "The drop from the baseline the gate allows (0.1: 10 %)",
    ),
    _g(
        "sparkctl_validate_memory_available_bytes",
        "cluster node",
        "validate",
        "Memory available on the node as the node checks read it (MemAvailable, "
        "or a smaller cgroup headroom)",
    ),
    # -- the fabric as the inventory plans it: sparkctl-fabric-<cluster>.prom
    _g(
        "sparkctl_fabric_expected_mtu_bytes",
        "cluster node twin device",
        "validate",
        "The MTU the inventory sets on each fabric netdev (device: the netdev name, "
        "as node_exporter's device label)",
    ),
    # -- serve verify: sparkctl-serve-verify-<cluster>.prom
    _g(
        "sparkctl_serve_verify_verdict",
        "cluster verdict",
        "serve verify",
        "1 for the last serve verify's verdict, 0 for the other verdicts",
    ),
    _g(
        "sparkctl_serve_verify_timestamp_seconds",
        "cluster",
        "serve verify",
        "When the last serve verify finished (Unix time)",
    ),
    _g(
        "sparkctl_serve_verify_duration_seconds",
        "cluster",
        "serve verify",
        "How long the last serve verify took",
    ),
    _g(
        "sparkctl_serve_verify_checks_failed",
        "cluster node",
        "serve verify",
        "Checks of serve verify that failed, per node",
    ),
    _g(
        "sparkctl_serve_verify_rank_running",
        "cluster group node",
        "serve verify",
        "1 when the rank's unit was active/running",
    ),
    _g(
        "sparkctl_serve_verify_ttft_seconds",
        "cluster group",
        "serve verify",
        "Median time to first token of the timed streamed requests",
    ),
    _g(
        "sparkctl_serve_verify_e2e_latency_seconds",
        "cluster group",
        "serve verify",
        "Median end-to-end latency of the timed streamed requests",
    ),
    _g(
        "sparkctl_serve_verify_decode_tokens_per_second",
        "cluster group",
        "serve verify",
        "Median decode rate of one request (tokens after the first / their time)",
    ),
    # -- sparkctl status: sparkctl-status-<cluster>.prom
    _g(
        "sparkctl_status_timestamp_seconds",
        "cluster",
        "status",
        "When sparkctl status last looked (Unix time)",
    ),
    _g("sparkctl_status_node_reachable", "cluster node", "status", "1 when the node answered"),
    _g(
        "sparkctl_status_rank_up",
        "cluster group node",
        "status",
        "1 when the rank's unit is active/running",
    ),
    _g(
        "sparkctl_status_probe_success",
        "cluster group",
        "status",
        "1 when the bounded one-token generation through the API answered",
    ),
    _g(
        "sparkctl_status_probe_duration_seconds",
        "cluster group",
        "status",
        "How long that generation took",
    ),
    _g(
        "sparkctl_status_gpu_thermal_slowdown",
        "cluster node",
        "status",
        "1 when nvidia-smi reports clocks_event_reasons.hw_thermal_slowdown or "
        "sw_thermal_slowdown Active",
    ),
    # -- sparkctl serve watch: sparkctl-watch-<cluster>.prom
    _g(
        "sparkctl_watchdog_timestamp_seconds",
        "cluster",
        "serve watch",
        "When the watchdog's last round ended (Unix time)",
    ),
    Spec(
        "sparkctl_watchdog_restarts_total",
        "counter",
        ("cluster", "group"),
        "serve watch",
        "Restarts of the whole group the watchdog made",
    ),
    _g(
        "sparkctl_watchdog_gave_up",
        "cluster group",
        "serve watch",
        "1 when the watchdog stopped the group and gave up (its circuit breaker opened)",
    ),
)
BY_NAME: dict[str, Spec] = {s.name: s for s in METRICS}


class Figures(Collector):
    """Values to write, checked against :data:`METRICS`: a name it declares, with exactly
    its labels. Collected as whole families (no ``_created`` series, which a file read
    again and again would only make wrong)."""

    def __init__(self) -> None:
        self._values: dict[str, dict[tuple[str, ...], float]] = {}

    def set(self, name: str, value: float, **labels: str) -> None:
        spec = BY_NAME.get(name)
        if spec is None:
            raise ValueError(f"{name}: not a metric sparkctl declares (sparkctl.metrics.METRICS)")
        if set(labels) != set(spec.labels):
            raise ValueError(f"{name} takes labels {spec.labels}, not {tuple(labels)}")
        if not math.isfinite(value):
            raise ValueError(f"{name}{labels}: {value!r} is not a number to write")
        self._values.setdefault(name, {})[tuple(labels[k] for k in spec.labels)] = float(value)

    def collect(self) -> Iterator[Metric]:
        for spec in METRICS:
            values = self._values.get(spec.name)
            if not values:
                continue
            family: GaugeMetricFamily | CounterMetricFamily
            if spec.kind == "counter":
                family = CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
            else:
                family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            for key, value in values.items():
                family.add_metric(list(key), value)
            yield family

    def registry(self) -> CollectorRegistry:
        reg = CollectorRegistry(auto_describe=False)
        reg.register(self)
        return reg


# ------------------------------------------------------------------ what each command writes
def _finished(report: Report) -> float:
    """``started`` (ISO 8601, UTC) plus the run's duration, as Unix time."""
    started = datetime.fromisoformat(report.started)
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    return started.timestamp() + report.duration_s


def _verdict(f: Figures, name: str, report: Report) -> None:
    for verdict in VERDICTS:
        f.set(
            name, 1.0 if report.verdict == verdict else 0.0, cluster=report.cluster, verdict=verdict
        )


def _failed_per_node(f: Figures, name: str, report: Report) -> None:
    hosts = list(report.hosts) + sorted({c.host for c in report.checks} - set(report.hosts))
    for host in hosts:
        failed = sum(1 for c in report.checks if c.host == host and not c.ok)
        f.set(name, failed, cluster=report.cluster, node=host)


def validate_metrics(
    report: Report, mem_available: Mapping[str, int] | None = None
) -> CollectorRegistry:
    """A validate run: its verdict, time, failed checks per node, the gate's figures per
    collective (all-node runs), the baseline ratio, and each node's available memory."""
    f, cluster = Figures(), report.cluster
    _verdict(f, "sparkctl_validate_verdict", report)
    f.set("sparkctl_validate_timestamp_seconds", _finished(report), cluster=cluster)
    f.set("sparkctl_validate_duration_seconds", report.duration_s, cluster=cluster)
    _failed_per_node(f, "sparkctl_validate_checks_failed", report)
    th = report.thresholds
    for run in report.nccl:
        if run.scope != "all":
            continue
        if run.fit is not None:
            f.set(
                "sparkctl_validate_busbw_bytes_per_second",
                run.fit.busbw * GB,
                cluster=cluster,
                collective=run.collective,
            )
        threshold = th.threshold_for(run.collective)
        if threshold is not None and threshold > 0:
            f.set(
                "sparkctl_validate_busbw_threshold_bytes_per_second",
                threshold * GB,
                cluster=cluster,
                collective=run.collective,
            )
    if report.baseline is not None:
        f.set(
            "sparkctl_validate_baseline_tolerance_ratio",
            report.baseline.tolerance,
            cluster=cluster,
        )
        ratios: dict[str, float] = {}
        for item in report.baseline.items:
            if item.baseline_busbw > 0:
                ratio = item.current_busbw / item.baseline_busbw
                ratios[item.collective] = min(ratio, ratios.get(item.collective, ratio))
        for collective, ratio in ratios.items():
            f.set(
                "sparkctl_validate_busbw_baseline_ratio",
                ratio,
                cluster=cluster,
                collective=collective,
            )
    for node, available in sorted((mem_available or {}).items()):
        f.set("sparkctl_validate_memory_available_bytes", available, cluster=cluster, node=node)
    return f.registry()


def fabric_metrics(cluster: str, plan: Plan) -> CollectorRegistry:
    """The MTU the inventory sets on every fabric netdev of every node (the alert rules
    compare node_exporter's node_network_mtu_bytes with it, and take its devices as the
    fabric's)."""
    f = Figures()
    for node in plan.nodes:
        fabric = plan.node(node).roce_fabric
        for twin in fabric.twins:
            f.set(
                "sparkctl_fabric_expected_mtu_bytes",
                fabric.mtu,
                cluster=cluster,
                node=node,
                twin=twin.twin,
                device=twin.netdev,
            )
    return f.registry()


# serve verify's note (sparkctl/serve/verify.py, verify()): "[group G: ]serving figures:
# ttft_s 0.123, e2e_s 1.234, decode_tokens_per_s 45.678"
_FIGURES_NOTE = re.compile(r"(?:group (?P<group>\S+): )?serving figures: (?P<figures>.+)")
_FIGURE_METRIC = {
    "ttft_s": "sparkctl_serve_verify_ttft_seconds",
    "e2e_s": "sparkctl_serve_verify_e2e_latency_seconds",
    "decode_tokens_per_s": "sparkctl_serve_verify_decode_tokens_per_second",
}


def serving_figures(report: Report, only_group: str = "") -> dict[str, dict[str, float]]:
    """group -> figure -> value, from serve verify's "serving figures" notes; a note
    without a group (one group only) is ``only_group``'s. A figure that does not read as
    a number is left out, never guessed."""
    out: dict[str, dict[str, float]] = {}
    for note in report.notes:
        m = _FIGURES_NOTE.fullmatch(note)
        if not m:
            continue
        figures = out.setdefault(m["group"] or only_group, {})
        for part in m["figures"].split(", "):
            key, _, value = part.partition(" ")
            try:
                number = float(value)
            except ValueError:
                continue
            if key in _FIGURE_METRIC and math.isfinite(number):
                figures[key] = number
    return out


def serve_verify_metrics(
    report: Report, groups: Mapping[str, Sequence[str]] | None = None
) -> CollectorRegistry:
    """A serve verify run: its verdict, time, failed checks per node, each rank's unit,
    and each group's median TTFT, end-to-end latency and decode rate. ``groups``: group
    name -> its members (sparkctl.serve.cluster.Cluster.groups)."""
    f, cluster = Figures(), report.cluster
    groups = groups or {}
    group_of = {node: name for name, members in groups.items() for node in members}
    _verdict(f, "sparkctl_serve_verify_verdict", report)
    f.set("sparkctl_serve_verify_timestamp_seconds", _finished(report), cluster=cluster)
    f.set("sparkctl_serve_verify_duration_seconds", report.duration_s, cluster=cluster)
    _failed_per_node(f, "sparkctl_serve_verify_checks_failed", report)
    for c in report.checks:
        if c.check == "rank_running":
            f.set(
                "sparkctl_serve_verify_rank_running",
                1.0 if c.outcome == "passed" else 0.0,
                cluster=cluster,
                group=group_of.get(c.host, ""),
                node=c.host,
            )
    only = next(iter(groups)) if len(groups) == 1 else ""
    for group, figures in serving_figures(report, only).items():
        for key, value in figures.items():
            f.set(_FIGURE_METRIC[key], value, cluster=cluster, group=group)
    return f.registry()


def status_metrics(
    cluster: str,
    *,
    reachable: Mapping[str, bool],
    ranks: Sequence[tuple[str, str, bool]],
    probes: Sequence[tuple[str, bool, float]],
    thermal: Mapping[str, bool],
    at: float | None = None,
) -> CollectorRegistry:
    """One sparkctl status look: each node reachable, each rank's unit up (group, node,
    up), each group's probe (group, ok, seconds), each node's thermal slowdown (only
    where nvidia-smi said)."""
    f = Figures()
    f.set("sparkctl_status_timestamp_seconds", time.time() if at is None else at, cluster=cluster)
    for node, ok in reachable.items():
        f.set("sparkctl_status_node_reachable", float(ok), cluster=cluster, node=node)
    for group, node, up in ranks:
        f.set("sparkctl_status_rank_up", float(up), cluster=cluster, group=group, node=node)
    for group, ok, seconds in probes:
        f.set("sparkctl_status_probe_success", float(ok), cluster=cluster, group=group)
        f.set("sparkctl_status_probe_duration_seconds", seconds, cluster=cluster, group=group)
    for node, slow in thermal.items():
        f.set("sparkctl_status_gpu_thermal_slowdown", float(slow), cluster=cluster, node=node)
    return f.registry()


def watch_metrics(
    cluster: str, groups: Mapping[str, tuple[int, bool]], at: float | None = None
) -> CollectorRegistry:
    """One serve watch round: per group, the restarts it made ever and whether it gave up."""
    f = Figures()
    f.set("sparkctl_watchdog_timestamp_seconds", time.time() if at is None else at, cluster=cluster)
    for group, (restarts, gave_up) in groups.items():
        f.set("sparkctl_watchdog_restarts_total", restarts, cluster=cluster, group=group)
        f.set("sparkctl_watchdog_gave_up", float(gave_up), cluster=cluster, group=group)
    return f.registry()


# ------------------------------------------------------------------ writing
def textfile_dir() -> Path | None:
    """``SPARKCTL_TEXTFILE_DIR``, or None when it is unset or empty (write nothing)."""
    env = os.environ.get(TEXTFILE_ENV, "").strip()
    return Path(env).expanduser() if env else None


def file_name(command: str, cluster: str) -> str:
    """``sparkctl-<command>-<cluster>`` (the alert rules match the files by it)."""
    return f"sparkctl-{command}-{cluster}"


def write(registry: CollectorRegistry, directory: Path, name: str) -> Path:
    """``directory/<name>.prom``, replaced whole (temp file in the same directory, then
    rename: prometheus_client's write_to_textfile). The directory must exist."""
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory")
    path = directory / f"{name}.prom"
    write_to_textfile(str(path), registry)
    return path


def publish(files: Iterable[tuple[str, CollectorRegistry]]) -> list[Path]:
    """Write each (name, registry) to ``SPARKCTL_TEXTFILE_DIR``; nothing when it is unset.
    A file that cannot be written is a warning, and the command goes on."""
    directory = textfile_dir()
    if directory is None:
        return []
    written = []
    for name, registry in files:
        try:
            written.append(write(registry, directory, name))
        except OSError as exc:
            console.warn(
                f"metrics not written to {directory / (name + '.prom')} ({TEXTFILE_ENV}): {exc}"
            )
    return written


def publish_validate(
    report: Report, plan: Plan | None, facts: Mapping[str, Mapping[str, Any]]
) -> list[Path]:
    """validate's figures, and the fabric as the plan sets it, when a directory is set."""
    if textfile_dir() is None:
        return []
    mem = {n: int(v["mem_available"]) for n, v in facts.items() if "mem_available" in v}
    files = [(file_name("validate", report.cluster), validate_metrics(report, mem))]
    if plan is not None:
        files.append((file_name("fabric", report.cluster), fabric_metrics(report.cluster, plan)))
    return publish(files)


def publish_serve_verify(report: Report, groups: Mapping[str, Sequence[str]]) -> list[Path]:
    """serve verify's figures, when a directory is set."""
    if textfile_dir() is None:
        return []
    return publish(
        [(file_name("serve-verify", report.cluster), serve_verify_metrics(report, groups))]
    )


def publish_status(
    cluster: str,
    *,
    reachable: Mapping[str, bool],
    ranks: Sequence[tuple[str, str, bool]],
    probes: Sequence[tuple[str, bool, float]],
    thermal: Mapping[str, bool],
) -> list[Path]:
    """status's figures, when a directory is set."""
    if textfile_dir() is None:
        return []
    registry = status_metrics(
        cluster, reachable=reachable, ranks=ranks, probes=probes, thermal=thermal
    )
    return publish([(file_name("status", cluster), registry)])


def publish_watch(cluster: str, groups: Mapping[str, tuple[int, bool]]) -> list[Path]:
    """serve watch's figures, when a directory is set."""
    if textfile_dir() is None:
        return []
    return publish([(file_name("watch", cluster), watch_metrics(cluster, groups))])
